"""The worker (:mod:`kale.worker.loop`) and its parts.

    from kale import worker
    worker.Worker().run()

- :mod:`~kale.worker.loop`: :class:`Worker`, one engine for every pool
  (:mod:`~kale.worker.pools`), with :mod:`~kale.worker.intake` (receiving),
  :mod:`~kale.worker.jobs` (where a task runs), :mod:`~kale.worker.gather`,
  :mod:`~kale.worker.threads`, :mod:`~kale.worker.aio` and
  :mod:`~kale.worker.watchdog`;
- :mod:`~kale.worker.base`: the parts and steps the worker is built from;
- :mod:`~kale.worker.batch`: a received batch, its budget, and settlements;
- :mod:`~kale.worker.runner`: decode, run under the time limit, decide;
- :mod:`~kale.worker.isolation`: a run in a forked child that can be killed;
- :mod:`~kale.worker.suspects`: messages a worker died holding run in groups;
- :mod:`~kale.worker.consumer` and :mod:`~kale.worker.settler`: settling in
  order, on a thread;
- :mod:`~kale.worker.report`: log lines and hooks per outcome;
- :mod:`~kale.worker.signals` and :mod:`~kale.worker.limits`: stopping;
- :mod:`~kale.worker.parts`: the selector, timeout and hooks from settings;
- :mod:`~kale.worker.supervisor`: ``kale worker --concurrency N``.
"""
from kale.worker.base import SHUTDOWN_SETTLE_SEC
from kale.worker.limits import EXIT_MEMORY_LIMIT, EXIT_OK, EXIT_STUCK, SUPERVISOR_PID_VARIABLE
from kale.worker.loop import Worker
from kale.worker.pools import DEFAULT_IN_FLIGHT, POOLS

__all__ = [
           'DEFAULT_IN_FLIGHT',
           'EXIT_MEMORY_LIMIT',
           'EXIT_OK',
           'EXIT_STUCK',
           'POOLS',
           'SHUTDOWN_SETTLE_SEC',
           'SUPERVISOR_PID_VARIABLE',
           'Worker',
]
