"""Where a worker's tasks run: its pool (``kale worker --pool``): serial,
threads or asyncio, and what follows from each (docs/explanation/internals-worker.md, "Pools").
"""
from __future__ import annotations

import dataclasses

from kale.settings_check import WORKER_POOLS
from kale.worker.settler import INLINE_BELOW_SEC

#: The pools a worker can run its tasks in.
POOLS = WORKER_POOLS
#: Each pool's default number of tasks in flight (WORKER_MAX_IN_FLIGHT).
DEFAULT_IN_FLIGHT = {'serial': 1, 'threads': 16, 'asyncio': 100}
#: Settling threads of a pool: on a remote endpoint each request takes a round trip.
POOL_SETTLE_THREADS = 4
#: Settling threads of the serial worker.
SERIAL_SETTLE_THREADS = 2


@dataclasses.dataclass(frozen=True)
class Pool:
    """What follows from a worker's pool."""

    name: str
    #: Tasks run on the worker's own thread, one at a time.
    inline: bool
    in_flight: int
    settle_threads: int
    #: Batches handed to the settler before the worker receives no more.
    max_pending: int
    #: Settle inline when the endpoint answers within this (0: never).
    inline_settle_below_sec: float


def pool_of(name: str, max_in_flight: int = 0) -> Pool:
    """The pool called ``name``, with ``max_in_flight`` tasks at most (0: its default)."""
    if name == 'serial':
        return Pool(name, True, 1, SERIAL_SETTLE_THREADS, SERIAL_SETTLE_THREADS,
                    INLINE_BELOW_SEC)
    return Pool(name, False, max_in_flight or DEFAULT_IN_FLIGHT[name], POOL_SETTLE_THREADS,
                2 * POOL_SETTLE_THREADS, 0.0)
