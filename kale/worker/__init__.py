"""The worker (:class:`Worker`, in :mod:`kale.worker.loop`) and its parts.

    from kale import worker
    worker.Worker().run()

The map of its modules is in docs/explanation/architecture.md; how they work,
in docs/explanation/internals-worker.md.
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
