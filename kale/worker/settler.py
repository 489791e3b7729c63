"""Settling batches: inline on a fast endpoint, on background threads on a slow
one (docs/explanation/internals-worker.md, "Inline or on threads").
"""
from __future__ import annotations

import collections
import itertools
import logging
import queue
import threading
from typing import Callable, Optional

from kale.clock import SYSTEM_CLOCK, Clock
from kale.worker.batch import Batch
from kale.worker.consumer import Consumer, SettleDeferred

logger = logging.getLogger(__name__)

#: Batches whose settling recently took less than this are settled inline.
INLINE_BELOW_SEC = 0.005
#: How many recent batches the choice looks at.
RECENT_BATCHES = 8
#: Batches settled at once on a slow endpoint: with one, settling would allow
#: at most one batch per round trip.
SETTLE_THREADS = 2


class Settler:
    """Settles the batches handed over: inline, or on its threads (two batches
    at once, so one may finish before an older one; each batch's own requests
    keep the consumer's order)."""

    def __init__(self, consumer: Consumer, max_pending: int = 2,
                 inline_below_sec: float = INLINE_BELOW_SEC,
                 clock: Clock = SYSTEM_CLOCK, threads: int = SETTLE_THREADS,
                 on_free: Optional[Callable[[], None]] = None):
        self.consumer = consumer
        #: Called (on a settling thread) when a batch settled leaves the
        #: settler no longer :meth:`full`: a worker waiting to receive wakes.
        self.on_free = on_free
        self.inline_below_sec = inline_below_sec
        self.clock = clock
        #: How long settling the last few batches took.
        self._recent: collections.deque[float] = collections.deque(maxlen=RECENT_BATCHES)
        self.max_pending = max_pending
        #: The median time settling one of the last few batches took (see _observe).
        self.recent_sec = 0.0
        #: Batches to settle, the earliest deadline first (a count breaks ties).
        self._jobs: 'queue.PriorityQueue[tuple[float, int, Optional[Batch]]]' = \
            queue.PriorityQueue()
        self._order = itertools.count()
        #: Settled batches for :meth:`completed` (appending to and popping
        #: from a deque is thread-safe, with no lock to take).
        self._done: collections.deque[Batch] = collections.deque()
        self._threads = [threading.Thread(target=self._run, name='kale-settler-%d' % n,
                                          daemon=True) for n in range(threads)]
        for thread in self._threads:
            thread.start()

    def submit(self, batch: Batch) -> None:
        """Settle ``batch`` now, or soon on a thread (never waiting for one)."""
        if self.recent_sec < self.inline_below_sec and self._jobs.unfinished_tasks == 0:
            started = self.clock.monotonic()
            try:
                self.consumer.settle(batch, retry=False)
            except SettleDeferred as exc:
                logger.warning('settling a batch of queue %s continues in the background: %s',
                               batch.queue.name, exc)
                self._observe(self.inline_below_sec)     # off the fast path for a while
                self._put(batch)
                return
            except Exception:   # keep settling later batches whatever one did
                logger.exception('settling a batch of queue %s failed', batch.queue.name)
            self._observe(self.clock.monotonic() - started)
            self._done.append(batch)
            return
        self._put(batch)

    def _put(self, batch: Optional[Batch]) -> None:
        deadline = batch.deadline if batch is not None else float('inf')
        self._jobs.put((deadline, next(self._order), batch))

    def busy(self) -> bool:
        """Whether every settling thread has a batch (a new one would wait)."""
        return self._jobs.unfinished_tasks >= len(self._threads)

    def settling(self) -> bool:
        """Whether a batch handed over is not settled yet."""
        return self._jobs.unfinished_tasks > 0

    def full(self) -> bool:
        """Whether ``max_pending`` batches wait: the worker receives no more meanwhile."""
        return self._jobs.unfinished_tasks >= self.max_pending

    def flush(self) -> None:
        """Wait until every batch handed over has been settled."""
        self._jobs.join()

    def completed(self) -> list[Batch]:
        """Batches settled since the last call, oldest first."""
        batches = []
        done = self._done
        while done:
            batches.append(done.popleft())
        return batches

    def close(self) -> None:
        """Settle what is pending, then stop the thread."""
        self.flush()
        for _ in self._threads:
            self._put(None)
        for thread in self._threads:
            thread.join(10)

    def _observe(self, seconds: float) -> None:
        """Settling one batch took ``seconds``: ``recent_sec`` is the median of the last
        few (a slow batch, a pause for garbage collection, does not change the choice)."""
        self._recent.append(seconds)
        recent = sorted(self._recent)
        self.recent_sec = recent[len(recent) // 2]

    def _run(self) -> None:
        while True:
            batch = self._jobs.get()[2]
            try:
                if batch is None:
                    return
                started = self.clock.monotonic()
                try:
                    self.consumer.settle(batch)
                except Exception:   # keep settling later batches whatever one did
                    logger.exception('settling a batch of queue %s failed', batch.queue.name)
                self._observe(self.clock.monotonic() - started)
                self._done.append(batch)
            finally:
                was_full = self.full()
                self._jobs.task_done()
                if was_full and self.on_free is not None and batch is not None:
                    self.on_free()
