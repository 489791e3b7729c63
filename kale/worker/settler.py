"""Settling batches on a background thread.

The worker hands each finished batch to the settler and goes on to fetch
the next one, so the deletes of one batch overlap the receive of the next
instead of stalling it. Each batch is still settled in the consumer's order
(release, copies, deletes) and before its deadline; at most ``max_pending``
batches wait, so a slow endpoint slows the worker down rather than letting
settled work pile up. :meth:`flush` waits until everything handed over is
settled; the worker calls it before it checks whether a burst is done and
before it exits.
"""
from __future__ import annotations

import logging
import queue
import threading
from typing import Optional

from kale.worker.batch import Batch
from kale.worker.consumer import Consumer

logger = logging.getLogger(__name__)


class Settler:
    """A thread that settles batches in the order they were handed over."""

    def __init__(self, consumer: Consumer, max_pending: int = 2):
        self.consumer = consumer
        self._jobs: 'queue.Queue[Optional[Batch]]' = queue.Queue(maxsize=max_pending)
        self._done: 'queue.Queue[Batch]' = queue.Queue()
        self._thread = threading.Thread(target=self._run, name='kale-settler', daemon=True)
        self._thread.start()

    def submit(self, batch: Batch) -> None:
        """Settle ``batch`` soon (waits while ``max_pending`` batches are queued)."""
        self._jobs.put(batch)

    def flush(self) -> None:
        """Wait until every batch handed over has been settled."""
        self._jobs.join()

    def completed(self) -> list[Batch]:
        """Batches settled since the last call, oldest first."""
        batches = []
        while True:
            try:
                batches.append(self._done.get_nowait())
            except queue.Empty:
                return batches

    def close(self) -> None:
        """Settle what is pending, then stop the thread."""
        self.flush()
        self._jobs.put(None)
        self._thread.join(10)

    def _run(self) -> None:
        while True:
            batch = self._jobs.get()
            try:
                if batch is None:
                    return
                try:
                    self.consumer.settle(batch)
                except Exception:   # keep settling later batches whatever one did
                    logger.exception('settling a batch of queue %s failed', batch.queue.name)
                self._done.put(batch)
            finally:
                self._jobs.task_done()
