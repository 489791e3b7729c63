"""Keeping a long task's message invisible while it runs.

A task whose ``time_limit`` is longer than its queue's visibility timeout
would reappear, and run again elsewhere, before it ends. Instead of forcing
a long visibility timeout on the whole queue (which would delay retries of
every crashed worker's messages as long), the worker runs such a task alone
and keeps extending its message's visibility, with ChangeMessageVisibility,
from a thread the task cannot block, shortly before each extension lapses.

An extension that fails is logged and the task keeps running: its message
may then run again elsewhere, as at-least-once delivery allows. If the
worker dies, the extensions stop and the message comes back within one
visibility timeout. SQS keeps a message invisible at most 12 hours from its
receive, which bounds ``time_limit``.
"""
from __future__ import annotations

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


def extension_lead(visibility_timeout_sec: float) -> float:
    """How long before the current extension lapses the next one is made: a
    third of the timeout, at most MAX_LEAD_SEC."""
    return min(visibility_timeout_sec / 3.0, MAX_LEAD_SEC)


class Heartbeat:
    """One thread per worker extending the visibility of the message that runs."""

    def __init__(self, broker: Broker, clock: Clock = SYSTEM_CLOCK):
        self.broker = broker
        self.clock = clock
        self.extensions = 0
        self._cond = threading.Condition()
        self._batch: Optional[Batch] = None
        self._received: Optional[ReceivedMessage] = None
        self._closed = False
        self._retry_at = 0.0
        self._thread: Optional[threading.Thread] = None

    def keep(self, batch: Batch, received: ReceivedMessage) -> None:
        """Keep ``received`` invisible until :meth:`stop`."""
        with self._cond:
            self._batch, self._received = batch, received
            self._retry_at = 0.0
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name='kale-heartbeat',
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def stop(self) -> None:
        """The run ended: no more extensions (one in progress finishes)."""
        with self._cond:
            self._batch = self._received = None
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._batch = self._received = None
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(5)

    def keeps(self, received: ReceivedMessage) -> bool:
        """Whether ``received`` is the message being kept invisible."""
        with self._cond:
            return self._received is received

    def _due(self) -> Optional[tuple[Batch, ReceivedMessage]]:
        """Wait until an extension is due; None once closed."""
        with self._cond:
            while not self._closed:
                batch, received = self._batch, self._received
                if batch is None or received is None:
                    self._cond.wait()
                    continue
                lead = extension_lead(batch.queue.visibility_timeout_sec)
                wait = max(batch.deadline - lead, self._retry_at) - self.clock.monotonic()
                if wait <= 0:
                    return batch, received
                self._cond.wait(wait)
            return None

    def _run(self) -> None:
        while True:
            due = self._due()
            if due is None:
                return
            self._extend(*due)

    def _extend(self, batch: Batch, received: ReceivedMessage) -> None:
        timeout = int(min(batch.queue.visibility_timeout_sec,
                          MAX_VISIBILITY_SEC - (self.clock.monotonic() - batch.received_at)))
        if timeout <= 0:                # SQS's 12 hours are up: nothing more to do
            with self._cond:
                if self._received is received:
                    self._batch = self._received = None
            return
        started = self.clock.monotonic()
        try:
            failed = self.broker.change_visibility(
                batch.queue, [VisibilityChange(received.receipt_handle, timeout)])
            problem = 'SQS refused' if failed else ''
        except SQSError as exc:
            problem = str(exc)
        with self._cond:
            if not problem:
                self.extensions += 1
                self._retry_at = 0.0
                batch.extended_until = started + timeout
            elif self._received is not received:
                pass                    # stopped meanwhile: nothing to retry
            elif self.clock.monotonic() < batch.deadline:
                logger.warning('could not extend the visibility of message %r on queue %s '
                               '(trying again): %s', received.message_id, batch.queue.name,
                               problem)
                self._retry_at = self.clock.monotonic() + min(extension_lead(timeout), 1.0)
            else:
                logger.warning('could not extend the visibility of message %r on queue %s '
                               'before it lapsed; it may run again elsewhere: %s',
                               received.message_id, batch.queue.name, problem)
                self._batch = self._received = None
