"""The worker: the loop (:mod:`kale.worker.loop`) and its parts.

    from kale import worker
    worker.Worker().run()

- :mod:`~kale.worker.loop`: :class:`Worker`, the loop made of named steps;
- :mod:`~kale.worker.receiver`: probes, receives and the idle watch;
- :mod:`~kale.worker.batch`: a received batch, its budget, and settlements;
- :mod:`~kale.worker.runner`: decode, run under the time limit, decide;
- :mod:`~kale.worker.isolation`: a run in a forked child that can be killed;
- :mod:`~kale.worker.suspects`: messages a worker died holding run alone;
- :mod:`~kale.worker.consumer` and :mod:`~kale.worker.settler`: settling in
  order, on a thread;
- :mod:`~kale.worker.report`: log lines and hooks per outcome;
- :mod:`~kale.worker.signals` and :mod:`~kale.worker.limits`: stopping;
- :mod:`~kale.worker.parts`: the selector, timeout and hooks from settings;
- :mod:`~kale.worker.supervisor`: ``kale worker --concurrency N``.
"""
from kale.worker.limits import EXIT_MEMORY_LIMIT, EXIT_OK, SUPERVISOR_PID_VARIABLE
from kale.worker.loop import SHUTDOWN_SETTLE_SEC, Worker

__all__ = [
           'EXIT_MEMORY_LIMIT',
           'EXIT_OK',
           'SHUTDOWN_SETTLE_SEC',
           'SUPERVISOR_PID_VARIABLE',
           'Worker',
]
