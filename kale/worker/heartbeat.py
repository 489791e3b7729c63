"""Keeping a long task's message invisible while it runs (docs/explanation/internals-worker.md,
"Long tasks: the heartbeat").
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Optional

from kale.broker import Broker
from kale.clock import SYSTEM_CLOCK, Clock
from kale.exceptions import SQSError
from kale.transport import MAX_VISIBILITY_SEC, ReceivedMessage, VisibilityChange
from kale.worker.batch import Batch

logger = logging.getLogger(__name__)

#: Longest time an extension is made before the last one lapses.
MAX_LEAD_SEC = 10.0
#: Visibility changes in one request (SQS's batch limit).
MAX_CHANGES = 10


def extension_lead(visibility_timeout_sec: float) -> float:
    """How long before the current extension lapses the next one is made: a
    third of the timeout, at most MAX_LEAD_SEC."""
    return min(visibility_timeout_sec / 3.0, MAX_LEAD_SEC)


@dataclasses.dataclass(eq=False)
class Kept:
    """A message kept invisible: its batch (whose deadline the extensions
    move) and when a failed extension is tried again."""

    batch: Batch
    received: ReceivedMessage
    retry_at: float = 0.0

    def due_at(self) -> float:
        lead = extension_lead(self.batch.queue.visibility_timeout_sec)
        return max(self.batch.deadline - lead, self.retry_at)


class Heartbeat:
    """One thread per worker extending the visibility of the messages that run
    long (one at a time in a serial worker; any number in a pool)."""

    def __init__(self, broker: Broker, clock: Clock = SYSTEM_CLOCK):
        self.broker = broker
        self.clock = clock
        self.extensions = 0
        self._cond = threading.Condition()
        self._kept: dict[int, Kept] = {}
        self._closed = False
        self._thread: Optional[threading.Thread] = None

    def keep(self, batch: Batch, received: ReceivedMessage) -> None:
        """Keep ``received`` invisible until :meth:`stop`."""
        with self._cond:
            self._kept[id(received)] = Kept(batch, received)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name='kale-heartbeat',
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def stop(self, received: Optional[ReceivedMessage] = None) -> None:
        """The run of ``received`` (default: every run) ended: no more
        extensions for it (one in progress finishes)."""
        with self._cond:
            if received is None:
                self._kept.clear()
            else:
                self._kept.pop(id(received), None)
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._kept.clear()
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(5)

    def keeps(self, received: ReceivedMessage) -> bool:
        """Whether ``received`` is a message being kept invisible."""
        kept = self._kept.get(id(received))
        return kept is not None and kept.received is received

    def _due(self) -> Optional[list[Kept]]:
        """Wait until extensions are due; None once closed."""
        with self._cond:
            while not self._closed:
                if not self._kept:
                    self._cond.wait()
                    continue
                now = self.clock.monotonic()
                due = [kept for kept in self._kept.values() if kept.due_at() <= now]
                if due:
                    return due
                self._cond.wait(min(kept.due_at() for kept in self._kept.values()) - now)
            return None

    def _run(self) -> None:
        while True:
            due = self._due()
            if due is None:
                return
            by_queue: dict[str, list[Kept]] = {}
            for kept in due:
                by_queue.setdefault(kept.batch.queue.name, []).append(kept)
            for entries in by_queue.values():
                for start in range(0, len(entries), MAX_CHANGES):
                    self._extend(entries[start:start + MAX_CHANGES])

    def _extend(self, entries: list[Kept]) -> None:
        now = self.clock.monotonic()
        changes, extending = [], []
        for kept in entries:
            batch = kept.batch
            timeout = int(min(batch.queue.visibility_timeout_sec,
                              MAX_VISIBILITY_SEC - (now - batch.received_at)))
            if timeout <= 0:                # SQS's 12 hours are up: nothing more to do
                with self._cond:
                    if self._kept.get(id(kept.received)) is kept:
                        del self._kept[id(kept.received)]
                continue
            changes.append(VisibilityChange(kept.received.receipt_handle, timeout))
            extending.append((kept, timeout))
        if not changes:
            return
        queue = entries[0].batch.queue
        try:
            refused = set(self.broker.change_visibility(queue, changes))
            problem = 'SQS refused'
        except SQSError as exc:
            refused = {change.receipt_handle for change in changes}
            problem = str(exc)
        with self._cond:
            for kept, timeout in extending:
                if kept.received.receipt_handle not in refused:
                    self.extensions += 1
                    kept.retry_at = 0.0
                    kept.batch.extended_until = now + timeout
                else:
                    self._failed(kept, problem)

    def _failed(self, kept: Kept, problem: str) -> None:
        """(Under the lock.) An extension failed: try again soon, or give up
        once the message's visibility has lapsed."""
        batch, received = kept.batch, kept.received
        if self._kept.get(id(received)) is not kept:
            return                      # stopped meanwhile: nothing to retry
        if self.clock.monotonic() < batch.deadline:
            logger.warning('could not extend the visibility of message %r on queue %s '
                           '(trying again): %s', received.message_id, batch.queue.name, problem)
            timeout = batch.queue.visibility_timeout_sec
            kept.retry_at = self.clock.monotonic() + min(extension_lead(timeout), 1.0)
        else:
            logger.warning('could not extend the visibility of message %r on queue %s '
                           'before it lapsed; it may run again elsewhere: %s',
                           received.message_id, batch.queue.name, problem)
            del self._kept[id(received)]
