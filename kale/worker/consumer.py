"""Receiving batches and settling them, in SQS batch requests, in the order that
can duplicate a task but never lose one (docs/explanation/internals-worker.md, "Settling").
"""
from __future__ import annotations

import collections
import dataclasses
import logging
from typing import Callable, Optional, Sequence, TypeVar

from kale.broker import Broker
from kale.clock import SYSTEM_CLOCK, Clock
from kale.codec import Codec
from kale.events import OUTCOMES, Outcome, Settle, Settlement
from kale.exceptions import BatchSendError, KaleError, SQSError
from kale.publish_checks import keep_tenant
from kale.queue_config import TaskQueue
from kale.retry import Backoff
from kale.transport import OutgoingMessage, VisibilityChange
from kale.worker.batch import COPY_MIN_SEC, Batch, SettleDeferred, visibility_clock_start
from kale.worker.control import QueuePauses
from kale.worker.dead_runs import send_dead_runs
from kale.worker.suspects import release, release_copy

logger = logging.getLogger(__name__)

#: How many more times entries of a delete that SQS failed are tried, at most
#: (each after a back-off, and only while the batch's budget lasts).
ENTRY_RETRY_ROUNDS = 5

T = TypeVar('T')


def fifo_copy(settlement: Settlement) -> Optional[OutgoingMessage]:
    """A dead-letter copy for a FIFO dead-letter queue: in the message's group,
    deduplicated by the message's own id."""
    copy, received = settlement.copy, settlement.received
    if copy is None or copy.group_id:
        return copy
    return dataclasses.replace(copy, group_id=received.group_id or 'kale',
                               dedup_id=received.message_id)


#: FIFO: the shortest hold of a message that its group's later messages are
#: released behind (they are held a second less: never 0 s, see _behind_their_group).
FIFO_HOLD_AHEAD_MIN_SEC = 2

#: Every kind of settling, in order.
_KINDS = tuple(Settle)


def _behind_their_group(held: list[Settlement]) -> None:
    """FIFO: a group's messages released because an earlier one of the group
    is held (for its retry, or a release's delay) stay invisible until a
    second before it, and that message is held 2 s at least (a release alone
    is made visible at once). SQS would not deliver them before it anyway,
    but an emulator may: LocalStack delivers a message made visible by a
    change to 0 while an earlier one of its group is in flight, so they are
    never released for 0 s behind a hold (a 1 s hold, which left them 0 s,
    ran them first there). Not as long as it: moto, given a group's messages
    visible again together, hands out the last of them first. On SQS the
    group waits for the held message anyway: the cost is a 1 s hold made 2 s."""
    holds = _longest_holds(held)
    behind = _released_behind(held, holds)
    if not behind:
        return
    groups = {s.received.group_id for s in behind}
    for settlement in held:
        if settlement.hold_sec and settlement.received.group_id in groups:
            settlement.hold_sec = max(settlement.hold_sec, FIFO_HOLD_AHEAD_MIN_SEC)
    for settlement in behind:
        settlement.hold_sec = max(holds[str(settlement.received.group_id)],
                                  FIFO_HOLD_AHEAD_MIN_SEC) - 1


def _longest_holds(held: list[Settlement]) -> dict[str, int]:
    """By group: the longest hold of its messages held."""
    holds: dict[str, int] = {}
    for settlement in held:
        group = settlement.received.group_id
        if settlement.hold_sec and group is not None:
            holds[group] = max(holds.get(group, 0), settlement.hold_sec)
    return holds


def _released_behind(held: list[Settlement], holds: dict[str, int]) -> list[Settlement]:
    """The releases (held for no time) of the groups in ``holds``."""
    return [s for s in held if s.outcome is Outcome.RELEASE and not s.hold_sec
            and s.received.group_id in holds]


def _by_kind(settlements: Sequence[Settlement]) -> dict[Settle, list[Settlement]]:
    """The settlements by what their outcome does: its row's ``settle`` (kale.events.OUTCOMES)."""
    by_kind: dict[Settle, list[Settlement]] = {kind: [] for kind in _KINDS}
    for settlement in settlements:
        by_kind[OUTCOMES[settlement.outcome].settle].append(settlement)
    return by_kind


def _to_delete(settlements: Sequence[Settlement]) -> list[Settlement]:
    """The messages still to delete: those whose copy was sent, and those done with."""
    return [s for s in settlements if not s.settled and (
        s.copied or OUTCOMES[s.outcome].settle is Settle.DELETE)]


class Consumer:
    """Receives batches from, and settles them on, one broker."""

    @property
    def codec(self) -> Codec:
        """The codec that signs release copies (by default the broker's)."""
        return self._codec or self.broker.codec

    def __init__(self, broker: Broker, clock: Clock = SYSTEM_CLOCK, max_backoff_sec: float = 30.0,
                 codec: Optional[Codec] = None):
        self.broker = broker
        self._codec = codec
        self.clock = clock
        self.max_backoff_sec = max_backoff_sec
        self._receive_times: collections.deque[float] = collections.deque(maxlen=8)
        #: When set (a ``clock()`` time), retrying stops then even if a batch's
        #: deadline is later: a stopping worker does not wait out an outage.
        self.give_up_at: Optional[float] = None
        #: The queues nothing is received from (see :mod:`kale.worker.control`).
        self.pauses = QueuePauses()

    # --- receiving -------------------------------------------------------------------

    def receive(self, queue: TaskQueue, wait_sec: Optional[int] = None,
              max_messages: Optional[int] = None) -> Batch:
        """Receive up to ``max_messages`` (default ``batch_size``) messages, long polling
        ``wait_sec`` (default the queue's), as a Batch; from a paused queue, none (see
        the docs page, "What operators ask through the records")."""
        if queue.name in self.pauses:
            self.pauses.wait(queue.name, queue.long_poll_time_sec if wait_sec is None
                             else wait_sec)
            now = self.clock.monotonic()
            return Batch(queue, [], now, self.broker.sqs_name(queue))
        started = self.clock.monotonic()
        messages = self.broker.receive(queue, max_messages, wait_sec=wait_sec)
        ended = self.clock.monotonic()
        if wait_sec == 0:           # a long poll's wait says nothing about the endpoint
            self._receive_times.append(ended - started)
        batch = Batch(queue, messages, visibility_clock_start(started, ended),
                      self.broker.sqs_name(queue))
        if messages and queue.name in self.pauses:
            logger.info('queue %s was paused while a receive was out: %d message(s) given '
                        'back unrun', queue.name, len(messages))
            self.settle(batch)      # nothing settled: every message released
            return Batch(queue, [], batch.received_at, batch.sqs_name)
        return batch

    @property
    def recent_receive_sec(self) -> float:
        """The median time of the last few short receives: how far the endpoint is."""
        recent = sorted(self._receive_times)
        return recent[len(recent) // 2] if recent else 0.0

    # --- settling -------------------------------------------------------------------

    def settle(self, batch: Batch, retry: bool = True) -> None:
        """Carry out every settlement of the batch (the unsettled are released); a copy
        sent or a message deleted is not again, so settling can be resumed: with ``retry``
        off, the first outage or throttling raises :class:`SettleDeferred` for that."""
        if not batch.settle_started:
            batch.settle_started = self.clock.time()
        for received in batch.unsettled():
            # With its verified envelope when it has one: hooks see its task.
            batch.settlements.append(release(batch, received, 'not reached'))
        by_kind = _by_kind(batch.settlements)
        dead_letters = by_kind[Settle.DEAD_LETTER]
        if batch.fifo:      # a retry or release stays in its group; no copy jumps the line
            held = [s for s in batch.settlements if OUTCOMES[s.outcome].holds_group]
            _behind_their_group(held)
            self._hold(batch, held, retry)
            for settlement in dead_letters:
                settlement.copy = fifo_copy(settlement)
        else:
            self._send_releases(batch, by_kind, retry)
        send_dead_runs(self, batch, dead_letters, retry)   # in place of their dead-letter copies
        self._send_copies(batch, dead_letters, dead_letter=True, retry=retry)
        self._delete(batch, _to_delete(batch.settlements), retry=retry)
        batch.settle_ended = self.clock.time()

    def _send_releases(self, batch: Batch, by_kind: dict[Settle, list[Settlement]],
                       retry: bool) -> None:
        """Not FIFO: send the release copies (made here if need be) with the
        other copies, each in its task's tenant on a fair queue."""
        releases = self._give_back_late(batch, by_kind[Settle.RELEASE], retry)
        for settlement in releases:
            if settlement.copy is None:
                settlement.copy = release_copy(settlement.received, batch.sqs_name, self.codec,
                                               settlement.envelope,
                                               batch.queue.visibility_timeout_sec)
        if batch.queue.fair:        # each copy in its task's tenant (kale.publish_checks)
            for settlement in batch.settlements:
                if settlement.copy is not None:
                    settlement.copy = keep_tenant(settlement.copy, settlement.received.group_id)
        self._send_copies(batch, releases + by_kind[Settle.COPY], dead_letter=False, retry=retry)

    def _give_back_late(self, batch: Batch, releases: list[Settlement],
                        retry: bool) -> list[Settlement]:
        """The releases still to be sent as copies: those made visible by a visibility
        change instead below COPY_MIN_SEC of budget (see the docs page) are not."""
        pending = [s for s in releases if not s.copied]
        if not pending:
            return pending
        left = batch.deadline - self.clock.monotonic()
        if left >= COPY_MIN_SEC:
            return pending
        if left > 0:
            self._hold(batch, pending, retry)
        for settlement in pending:
            if not settlement.settled:
                settlement.lapsed = True
        return []

    def _hold(self, batch: Batch, settlements: Sequence[Settlement], retry: bool = True) -> None:
        """FIFO: keep retried and released messages, invisible for their delay."""
        settlements = [s for s in settlements if not s.settled]
        if not settlements:
            return
        changes = [VisibilityChange(s.received.receipt_handle, s.hold_sec or 0)
                   for s in settlements]
        failed = self._failed_handles(
            batch, 'visibility change', lambda: self.broker.change_visibility(batch.queue, changes),
            retry, 'could not hold %d messages on FIFO queue %s (they reappear when their '
                   'visibility timeout ends)' % (len(changes), batch.queue.name))
        if failed is None:
            return
        for settlement in settlements:
            settlement.settled = settlement.copied = \
                settlement.received.receipt_handle not in failed

    def _failed_handles(self, batch: Batch, what: str, request: Callable[[], list[str]],
                        retry: bool, failure: str) -> Optional[set[str]]:
        """The receipt handles a batch request failed for; None (logged) when it all failed."""
        try:
            return set(self._attempt(batch, what, request, retry))
        except SQSError as exc:
            logger.error('%s: %s', failure, exc)
            return None

    def _attempt(self, batch: Batch, what: str, request: Callable[[], T], retry: bool = True,
                 before_deadline_sec: float = 0.0) -> T:
        """Run one request, retrying outages and throttling until
        ``before_deadline_sec`` before the batch's deadline (or ``give_up_at``,
        if that is sooner); without ``retry``, raising SettleDeferred at the
        first such failure."""
        backoff: Optional[Backoff] = None       # made at the first failure
        while True:
            try:
                return request()
            except SQSError as exc:
                if not exc.retryable:
                    raise
                if not retry:
                    raise SettleDeferred(exc) from exc
                if backoff is None:
                    backoff = Backoff(maximum=self.max_backoff_sec)
                delay = backoff.next_delay()
                limit = batch.deadline - before_deadline_sec
                if self.give_up_at is not None:
                    limit = min(limit, self.give_up_at)
                if self.clock.monotonic() + delay >= limit:
                    raise
                logger.warning('%s on queue %s failed, retrying in %.1fs: %s',
                               what, batch.queue.name, delay, exc)
                self.clock.sleep(delay)

    def _send_copies(self, batch: Batch, settlements: Sequence[Settlement],
                     dead_letter: bool, retry: bool = True) -> None:
        """Send the fresh, retry or dead-letter copies not sent yet, marking
        each settlement whose copy was sent."""
        settlements = [s for s in settlements if not s.copied]
        if not settlements:
            return
        what = 'dead-letter copy' if dead_letter else 'copy'
        if self._too_late_to_copy(batch, settlements, what):
            return
        if not dead_letter:
            self._send_marking(batch, settlements, self.broker.send, what, retry)
        elif self.broker.dead_letter_name(batch.queue) is None:
            for settlement in settlements:
                logger.error('task %s (%s) dropped: %s (ENABLE_DEAD_LETTER_QUEUE is off)',
                             settlement.task_id, settlement.task_name, settlement.reason)
                settlement.copied = True
        else:
            self._send_marking(batch, settlements, self.broker.send_dead_letters, what, retry)

    def _too_late_to_copy(self, batch: Batch, settlements: Sequence[Settlement],
                          what: str) -> bool:
        """Whether the batch's budget is too short for copies; if so, the
        settlements are marked lapsed: SQS may deliver the originals again."""
        if batch.deadline - self.clock.monotonic() >= COPY_MIN_SEC:
            return False
        for settlement in settlements:
            settlement.lapsed = True
        logger.error('%d %s(s) on queue %s not sent: the batch\'s visibility timeout '
                     'ended (or nearly); SQS delivers the originals again',
                     len(settlements), what, batch.queue.name)
        return True

    def _send_marking(self, batch: Batch, settlements: Sequence[Settlement],
                      send: Callable[[TaskQueue, list[OutgoingMessage]], object], what: str,
                      retry: bool) -> None:
        """Send the settlements' copies in one request, marking those sent."""
        copies: list[OutgoingMessage] = []
        for settlement in settlements:
            assert settlement.copy is not None, 'a copy is needed to settle this way'
            copies.append(settlement.copy)
        try:
            self._attempt(batch, what, lambda: send(batch.queue, copies), retry, COPY_MIN_SEC)
        except BatchSendError as exc:
            for i, settlement in enumerate(settlements):
                settlement.copied = i not in exc.failed
            logger.error('%d of %d %s sends failed on queue %s; their originals stay queued: %s',
                         len(exc.failed), len(copies), what, batch.queue.name, exc)
            return
        except SQSError as exc:
            logger.error('%s sends failed on queue %s; the originals stay queued: %s',
                         what, batch.queue.name, exc)
            return
        for settlement in settlements:
            settlement.copied = True

    def _delete(self, batch: Batch, settlements: Sequence[Settlement], retry: bool = True) -> None:
        if not settlements:
            return
        failed = self._deleted(batch, [s.received.receipt_handle for s in settlements], retry)
        if failed is None:
            return
        failed = self._delete_again(batch, failed, retry)
        for settlement in settlements:
            settlement.settled = settlement.received.receipt_handle not in failed
            envelope = settlement.envelope
            if settlement.settled and envelope is not None and envelope.offloaded:
                self._discard_payload(batch, settlement)

    def _delete_again(self, batch: Batch, failed: set[str], retry: bool) -> set[str]:
        """Entries SQS failed (an internal error on its side), tried again while
        the budget lasts (each one left is a task run twice); those still left."""
        if not failed:
            return failed
        backoff = Backoff(maximum=self.max_backoff_sec)
        for _ in range(ENTRY_RETRY_ROUNDS):
            delay = backoff.next_delay()
            if not failed or retry is False or \
                    self.clock.monotonic() + delay >= batch.deadline - COPY_MIN_SEC:
                break
            self.clock.sleep(delay)
            still = self._deleted(batch, sorted(failed), retry)
            if still is None:
                break
            failed = still
        return failed

    def _deleted(self, batch: Batch, handles: list[str], retry: bool) -> Optional[set[str]]:
        """Delete the messages; the handles SQS failed (None: the request failed)."""
        return self._failed_handles(
            batch, 'delete', lambda: self.broker.delete(batch.queue, handles), retry,
            'could not delete %d settled messages on queue %s (they will run again)'
            % (len(handles), batch.queue.name))

    def _discard_payload(self, batch: Batch, settlement: Settlement) -> None:
        """Delete the S3 object of a deleted message (its payload offloaded)
        whose task is done."""
        envelope = settlement.envelope
        assert envelope is not None
        # Dropped (no dead-letter queue), or handled by a dead run, which
        # carries a payload of its own.
        dropped = settlement.outcome.settle is Settle.DEAD_LETTER and (
            settlement.dead_run is not None or self.broker.dead_letter_name(batch.queue) is None)
        if not OUTCOMES[settlement.outcome].task_done and not dropped:
            return
        try:
            self.codec.discard(envelope)
        except KaleError as exc:        # S3 refused or unreachable: settling goes on
            logger.warning('task %s (%s): its payload object was not deleted from S3 (the '
                           "bucket's lifecycle rule will expire it): %s",
                           settlement.task_id, settlement.task_name, exc)
