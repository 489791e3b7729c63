"""The worker: the loop (:mod:`kale.worker.loop`) and its parts.

    from kale import worker
    worker.Worker().run()

- :mod:`~kale.worker.base`: the parts and steps every worker shares;
- :mod:`~kale.worker.loop`: :class:`Worker`, the serial loop of named steps;
- :mod:`~kale.worker.flight`: :class:`FlightWorker`, many tasks at once
  (``--pool threads|asyncio``), with :mod:`~kale.worker.intake`,
  :mod:`~kale.worker.gather`, :mod:`~kale.worker.threads`,
  :mod:`~kale.worker.aio` and :mod:`~kale.worker.watchdog`;
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
from kale.worker.flight import DEFAULT_IN_FLIGHT, POOLS, FlightWorker
from kale.worker.limits import EXIT_MEMORY_LIMIT, EXIT_OK, EXIT_STUCK, SUPERVISOR_PID_VARIABLE
from kale.worker.loop import SHUTDOWN_SETTLE_SEC, Worker

__all__ = [
           'DEFAULT_IN_FLIGHT',
           'EXIT_MEMORY_LIMIT',
           'EXIT_OK',
           'EXIT_STUCK',
           'POOLS',
           'SHUTDOWN_SETTLE_SEC',
           'SUPERVISOR_PID_VARIABLE',
           'FlightWorker',
           'Worker',
]
