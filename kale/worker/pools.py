"""Where a worker's tasks run: its pool (``kale worker --pool``).

One engine (:class:`kale.worker.loop.Worker`) runs every pool; the pool
decides only where a task runs and what follows from that:

- ``serial``: one task at a time, on the worker's own thread. Its time limit
  is held by SIGALRM (:class:`~kale.timeout.SignalTimeout`), which can cut
  short a blocking call; its receives are made on that thread too, each as
  large as what the queue's recent run times say will start within a
  second (:class:`~kale.worker.prefetch.Prefetch`), and a batch received
  blind gives back what has not started within that second. Settling goes
  inline on a fast endpoint, on two threads on a slow one.
- ``threads`` (16 in flight by default): plain tasks on threads of the
  worker, held to their limit by the watchdog (:mod:`kale.worker.threads`).
- ``asyncio`` (100 in flight): the same, coroutine tasks on the worker's
  event loop. Either pool runs both kinds of task.

The pools receive on threads (:mod:`kale.worker.intake`) while their tasks
run, and never settle inline: a settle request that hangs would hold the
worker's loop, and what waits to start with it.
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
