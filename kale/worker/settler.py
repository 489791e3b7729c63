"""Settling batches: inline on a fast endpoint, on background threads on a slow one.

Settling a batch costs one or two batch requests. Where those answer within
a millisecond (an endpoint on this machine, the memory transport), the
worker settles in its own thread: handing a batch to another thread would
cost more than the requests. Where they take longer (SQS itself, 10-20 ms
away), the worker hands the batch to a thread and goes on to receive the next
one, so that the deletes of one batch overlap the receive of the next; two
threads settle two batches at once. The choice follows the recent settle
times, batch by batch.

Either way each batch is settled in the consumer's order (release, copies,
deletes) and before its deadline. Settled inline, a batch does not wait out
an outage: at the first failure it is handed to the thread, which resumes it
where it stopped. At most ``max_pending`` batches wait for the thread, so a
slow endpoint slows the worker down rather than letting settled work pile up.
:meth:`flush` waits until everything handed over is settled; the worker calls
it before it checks whether a burst is done and before it exits.
"""
from __future__ import annotations

import collections
import logging
import queue
import threading
from typing import Optional

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
                 clock: Clock = SYSTEM_CLOCK, threads: int = SETTLE_THREADS):
        self.consumer = consumer
        self.inline_below_sec = inline_below_sec
        self.clock = clock
        #: How long settling the last few batches took.
        self._recent: collections.deque[float] = collections.deque(maxlen=RECENT_BATCHES)
        self._jobs: 'queue.Queue[Optional[Batch]]' = queue.Queue(maxsize=max_pending)
        #: Settled batches for :meth:`completed` (appending to and popping
        #: from a deque is thread-safe, with no lock to take).
        self._done: collections.deque[Batch] = collections.deque()
        self._threads = [threading.Thread(target=self._run, name='kale-settler-%d' % n,
                                          daemon=True) for n in range(threads)]
        for thread in self._threads:
            thread.start()

    def submit(self, batch: Batch) -> None:
        """Settle ``batch`` now, or soon on the thread (waiting while
        ``max_pending`` batches are queued there)."""
        if self.recent_sec < self.inline_below_sec and self._jobs.unfinished_tasks == 0:
            started = self.clock.monotonic()
            try:
                self.consumer.settle(batch, retry=False)
            except SettleDeferred as exc:
                logger.warning('settling a batch of queue %s continues in the background: %s',
                               batch.queue.name, exc)
                self._observe(self.inline_below_sec)     # off the fast path for a while
                self._jobs.put(batch)
                return
            except Exception:   # keep settling later batches whatever one did
                logger.exception('settling a batch of queue %s failed', batch.queue.name)
            self._observe(self.clock.monotonic() - started)
            self._done.append(batch)
            return
        self._jobs.put(batch)

    def busy(self) -> bool:
        """Whether every settling thread has a batch (a new one would wait)."""
        return self._jobs.unfinished_tasks >= len(self._threads)

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
            self._jobs.put(None)
        for thread in self._threads:
            thread.join(10)

    @property
    def recent_sec(self) -> float:
        """The median time settling one of the last few batches took: one slow
        batch (a pause for garbage collection) does not change the choice."""
        recent = sorted(self._recent)
        return recent[len(recent) // 2] if recent else 0.0

    def _observe(self, seconds: float) -> None:
        self._recent.append(seconds)

    def _run(self) -> None:
        while True:
            batch = self._jobs.get()
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
                self._jobs.task_done()
