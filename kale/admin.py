"""Operator actions on queues: inspect, purge, redrive dead letters, publish by path
(``kale queues``, ``purge``, ``dlq redrive``, ``publish``), and the autoscaling signals
(docs/explanation/internals-top.md, "Autoscaling signals"). A dead letter's payload
kept in S3 stays: a redriven one points at it again, and :func:`purge_dead_letters`
deletes it with its dead letter.
"""
from __future__ import annotations

import dataclasses
import datetime
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from kale import internal
from kale.broker import Broker
from kale.codec import Codec, Frame
from kale.exceptions import (
    BatchSendError,
    DecodeError,
    NoDeadLetterQueueError,
    PayloadStoreError,
    PublishError,
    QueueNotFoundError,
    SQSError,
    UnknownTaskPathError,
)
from kale.message import ATTR_DEAD_LETTER_REASON, Message, publisher_identity
from kale.publish_checks import keep_tenant
from kale.queue_config import TaskQueue
from kale.statuses import WorkerState
from kale.transport import MAX_BATCH_ENTRIES, OutgoingMessage, ReceivedMessage, VisibilityChange

if TYPE_CHECKING:
    from kale.app import App

logger = logging.getLogger(__name__)

PURGE_IN_PROGRESS_CODES = frozenset({'AWS.SimpleQueueService.PurgeQueueInProgress',
                                     'PurgeQueueInProgress'})

#: Seconds a dead letter being redriven stays invisible to other readers.
REDRIVE_VISIBILITY_SEC = 120


@dataclasses.dataclass
class QueueStatus:
    """One row of ``kale queues``. Counts are None when the queue does not exist yet."""

    name: str
    sqs_name: str
    priority: int
    visible: Optional[int]
    in_flight: Optional[int]
    delayed: Optional[int]
    dead_letters: Optional[int]

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _counts(broker: Broker, sqs_name: Optional[str]) -> Any:
    if sqs_name is None:
        return None
    try:
        return broker.transport.counts(sqs_name)
    except QueueNotFoundError:
        return None


def queue_statuses(broker: Broker) -> list[QueueStatus]:
    """Counts of every configured queue and its dead-letter queue (creates nothing)."""
    rows = []
    for queue in broker.queues.values():
        counts = _counts(broker, broker.sqs_name(queue))
        dead = _counts(broker, broker.dead_letter_name(queue))
        rows.append(QueueStatus(
            queue.name, broker.sqs_name(queue), queue.priority,
            counts.visible if counts else None, counts.in_flight if counts else None,
            counts.delayed if counts else None, dead.total if dead else None))
    return rows


def _dead_letter_name(broker: Broker, queue: TaskQueue) -> str:
    name = broker.dead_letter_name(queue)
    if name is None:
        raise NoDeadLetterQueueError('queue %r has no dead-letter queue (ENABLE_DEAD_LETTER_QUEUE is off)'
                        % queue.name)
    return name


def purge(broker: Broker, queue: TaskQueue, dead_letters: bool = False) -> str:
    """Delete every message of the queue (or of its dead-letter queue); returns the SQS name."""
    name = _dead_letter_name(broker, queue) if dead_letters else broker.sqs_name(queue)
    try:
        broker.transport.purge(name)
    except SQSError as exc:
        if exc.code not in PURGE_IN_PROGRESS_CODES:
            raise
        raise SQSError('queue %r was purged less than 60 seconds ago, and SQS allows one purge '
                       'per queue every 60 seconds: nothing was deleted now; try again in a '
                       'minute' % name, exc.code) from None
    return name


@dataclasses.dataclass
class PurgeReport:
    """What :func:`purge_dead_letters` deleted."""

    dead_letters: int = 0
    #: Payload objects deleted from S3 (one per dead letter that pointed at one).
    objects: int = 0


def purge_dead_letters(broker: Broker, queue: TaskQueue,
                       progress: Callable[[PurgeReport], None] = lambda report: None
                       ) -> PurgeReport:
    """Delete every dead letter of the queue and the S3 objects its verified
    pointers name (ten at a time; an unsigned pointer is never followed):
    slower than a purge, for ``PAYLOAD_BUCKET``. When S3 fails, it stops
    with PayloadStoreError saying how far it got; the rest stays.
    """
    dead_name = _dead_letter_name(broker, queue)
    codec = broker.codec
    report = PurgeReport()
    while True:
        batch = broker.transport.receive(dead_name, MAX_BATCH_ENTRIES, 1,
                                         REDRIVE_VISIBILITY_SEC, ())
        if not batch:
            return report
        try:
            for received in batch:
                report.objects += _discard_payload(codec, received)
        except PayloadStoreError as exc:
            broker.transport.change_visibility_batch(
                dead_name, [VisibilityChange(m.receipt_handle, 0) for m in batch])
            raise PayloadStoreError(
                'purge of %r stopped after %d dead letters and %d payload objects: %s'
                % (dead_name, report.dead_letters, report.objects, exc), exc.code) from None
        failed = broker.transport.delete_batch(dead_name, [m.receipt_handle for m in batch])
        report.dead_letters += len(batch) - len(failed)
        progress(report)


def _discard_payload(codec: Codec, received: ReceivedMessage) -> int:
    """Delete the S3 object a dead letter's verified pointer names; 1 if it had one."""
    try:
        envelope = codec.open(received.body, '', check_age=False)
        if not envelope.offloaded:
            return 0
        codec.discard(envelope)
    except DecodeError:             # not signed (or malformed): nothing it says is followed
        return 0
    return 1


@dataclasses.dataclass
class RedriveReport:
    """What a redrive moved (or, dry, would move), and what it left in place."""

    moved: int = 0
    #: Dead letters that do not verify or decode for this queue: left in place.
    skipped: int = 0
    skipped_reasons: dict[str, int] = dataclasses.field(default_factory=dict)
    #: Dead letters left in place because their reason was not the one asked for.
    not_matching: int = 0
    #: Moved dead letters by the reason they were dead-lettered for.
    reasons: dict[str, int] = dataclasses.field(default_factory=dict)
    #: When the moved tasks were first published (epoch seconds); the copies
    #: are issued afresh.
    first_published_at: Optional[float] = None
    last_published_at: Optional[float] = None

    def count_moved(self, reason: str, published_at: float) -> None:
        self.moved += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1
        if published_at:
            self.first_published_at = min(self.first_published_at or published_at, published_at)
            self.last_published_at = max(self.last_published_at or published_at, published_at)


def dead_letter_reason(received: ReceivedMessage) -> str:
    """Why a message was dead-lettered: the first word of its reason attribute,
    or ``max_receive_count`` for one SQS moved itself (its worker kept dying)."""
    reason = received.attributes.get(ATTR_DEAD_LETTER_REASON, '')
    return reason.split(':', 1)[0].strip() or 'max_receive_count'


def redrive(broker: Broker, queue: TaskQueue, limit: Optional[int] = None,
            reason: Optional[str] = None, dry_run: bool = False,
            progress: Callable[[RedriveReport], None] = lambda report: None) -> RedriveReport:
    """Move dead letters back to their queue, counts reset, each signed afresh
    (a payload kept in S3 stays, and the copy points at it); with ``reason``,
    only those dead-lettered for it. Each batch's copies are sent before its
    originals are deleted: an interruption can duplicate a task, never lose
    one. Dead letters that do not verify for this queue stay; a dead run that
    failed for good goes back to the dead-run queue. ``dry_run`` moves
    nothing and reports what would move.
    """
    dead_name = _dead_letter_name(broker, queue)
    report = RedriveReport()
    left_handles: list[str] = []
    try:
        while limit is None or report.moved < limit:
            batch = broker.transport.receive(dead_name, _wanted(limit, report.moved), 1,
                                             REDRIVE_VISIBILITY_SEC, [ATTR_DEAD_LETTER_REASON])
            if not batch:
                break
            movable = _movable(broker, queue, batch, reason, report, left_handles)
            if dry_run:
                left_handles += [received.receipt_handle for received, _, _ in movable]
            else:
                _move_batch(broker, queue, dead_name, movable, report)
            progress(report)
    finally:
        _release(broker, dead_name, left_handles)
    return report


def _wanted(limit: Optional[int], moved: int) -> int:
    """How many dead letters to receive next, ``moved`` of at most ``limit`` moved."""
    return MAX_BATCH_ENTRIES if limit is None else min(MAX_BATCH_ENTRIES, limit - moved)


def _move_batch(broker: Broker, queue: TaskQueue, dead_name: str,
                movable: Sequence[tuple[ReceivedMessage, OutgoingMessage, bool]],
                report: RedriveReport) -> None:
    """Move a batch's copies to the queue, failed dead runs to the dead-run queue."""
    _move(broker, queue, dead_name, [m[:2] for m in movable if not m[2]], report,
          broker.send)
    _move(broker, queue, dead_name, [m[:2] for m in movable if m[2]], report,
          broker.send_dead_runs)


def _release(broker: Broker, dead_name: str, left_handles: list[str]) -> None:
    """Make the dead letters left in place visible again at once."""
    if left_handles:
        broker.transport.change_visibility_batch(
            dead_name, [VisibilityChange(handle, 0) for handle in left_handles])


def _movable(broker: Broker, queue: TaskQueue, batch: Sequence[ReceivedMessage],
             reason: Optional[str], report: RedriveReport,
             left_handles: list[str]) -> list[tuple[ReceivedMessage, OutgoingMessage, bool]]:
    """The batch's dead letters to move, with their fresh copies and whether
    each is a dead run; the others are counted and kept for release."""
    codec = broker.codec
    sqs_name = broker.sqs_name(queue)
    dead_run_name = broker.dead_run_name(queue)
    movable = []
    for received in batch:
        why = dead_letter_reason(received)
        if reason is not None and why != reason:
            report.not_matching += 1
            left_handles.append(received.receipt_handle)
            continue
        try:
            target, envelope, message = _decode(codec, received, sqs_name, dead_run_name)
        except DecodeError as exc:
            report.skipped += 1
            report.skipped_reasons[exc.reason] = report.skipped_reasons.get(exc.reason, 0) + 1
            left_handles.append(received.receipt_handle)
            continue
        copy = _fresh_copy(codec, queue, received, envelope, message, target)
        movable.append((received, copy, target != sqs_name))
        report.count_moved(why, message.published_at)
    return movable


def _decode(codec: Codec, received: ReceivedMessage, sqs_name: str,
            dead_run_name: Optional[str]) -> tuple[str, Frame, Message]:
    """The queue a dead letter was signed for (its queue or dead-run queue),
    its envelope and message; DecodeError when it verifies for neither."""
    target = sqs_name
    try:
        envelope = codec.open(received.body, sqs_name, check_age=False)
    except DecodeError as exc:
        if exc.reason != DecodeError.WRONG_QUEUE or dead_run_name is None:
            raise
        target = dead_run_name          # a dead run that failed for good
        envelope = codec.open(received.body, target, check_age=False)
    return target, envelope, codec.read(envelope)   # a payload in S3 is checked, too


def _fresh_copy(codec: Codec, queue: TaskQueue, received: ReceivedMessage, envelope: Frame,
                message: Message, target: str) -> OutgoingMessage:
    """A copy of the dead letter for ``target``, its counts reset and issued now."""
    now = time.time()
    fresh = dataclasses.replace(message, retry_num=0, failure_num=0, sent_at=now,
                                published_at=now, unsettled=0, publisher=publisher_identity())
    copy = codec.reissue(envelope, fresh, target)      # a payload in S3: same object
    if queue.fifo:      # back into its group; moving it twice sends it once
        return dataclasses.replace(copy, group_id=received.group_id or 'kale',
                                   dedup_id='redrive-' + received.message_id)
    if queue.fair:      # back in its tenant
        return keep_tenant(copy, received.group_id)
    return copy


def _move(broker: Broker, queue: TaskQueue, dead_name: str,
          movable: Sequence[tuple[ReceivedMessage, OutgoingMessage]],
          report: RedriveReport,
          send: Callable[[TaskQueue, Sequence[OutgoingMessage]], Any]) -> None:
    if not movable:
        return
    try:
        send(queue, [copy for _, copy in movable])
    except BatchSendError as exc:      # delete only what was copied, then report
        report.moved -= len(exc.failed)
        _delete_moved(broker, dead_name, [received for i, (received, _) in enumerate(movable)
                                          if i not in exc.failed])
        raise
    _delete_moved(broker, dead_name, [received for received, _ in movable])


def _delete_moved(broker: Broker, dead_name: str, moved: Sequence[ReceivedMessage]) -> None:
    if not moved:
        return
    failed = set(broker.transport.delete_batch(dead_name, [m.receipt_handle for m in moved]))
    if failed:
        logger.warning('%d redriven dead letters could not be deleted and may be redriven again',
                       len(failed))


def publish_by_path(app: 'App', task_path: str, args: Sequence[Any], kwargs: dict[str, Any],
                    delay_sec: float = 0, app_data: Any = None) -> str:
    """Publish the task class at ``task_path`` through ``app``; returns its task id."""
    if 'delay_sec' in kwargs:
        raise PublishError('delay_sec is not passed to tasks; give the delay with --delay')
    try:
        task_class = app.registry.resolve(task_path)
    except DecodeError:
        raise UnknownTaskPathError(
            '%r is not an importable kale Task class (give module.ClassName, importable from '
            'the current directory)' % task_path) from None
    refused = internal.refuse(task_class)
    if refused:
        raise PublishError(refused)
    return app.publish(task_class, app_data, *args, delay_sec=delay_sec, **kwargs)


@dataclasses.dataclass
class QueueSignals(QueueStatus):
    """One queue's figures: its row of ``kale queues`` and these (None where
    unknown: no records and no CloudWatch value, no worker)."""

    #: Seconds the oldest waiting task has waited, and where that came from
    #: ('records' or 'cloudwatch').
    oldest_age_sec: Optional[float] = None
    oldest_from: Optional[str] = None
    #: Running worker processes serving the queue (records only).
    workers: Optional[int] = None
    backlog_per_worker: Optional[float] = None


def serving_workers(queries: Any, now: Optional[float] = None) -> dict[str, int]:
    """Running worker processes (not supervisors) by the queue names they serve,
    from the records' worker rows (``queries``: :func:`kale.records.queries`)."""
    serving: dict[str, int] = {}
    for worker in queries.workers(WorkerState.RUNNING, now):
        if worker.role == 'worker':
            for name in worker.queues:
                serving[name] = serving.get(name, 0) + 1
    return serving


def queue_signals(broker: Broker, queries: Any = None, now: Optional[float] = None,
                  cloudwatch: Optional[Callable[[list[str]], dict[str, float]]] = None
                  ) -> list[QueueSignals]:
    """Every configured queue's signals: ages and workers from the records'
    ``queries`` when given, else ages from ``cloudwatch`` (default: CloudWatch)."""
    now = time.time() if now is None else now
    rows = [QueueSignals(**status.as_dict()) for status in queue_statuses(broker)]
    if queries is not None:
        _add_from_records(rows, queries, now)
        return rows
    _add_from_cloudwatch(rows, _cloudwatch(broker, now) if cloudwatch is None else cloudwatch)
    return rows


def _add_from_records(rows: list[QueueSignals], queries: Any, now: float) -> None:
    """Fill in each queue's oldest task's age, its workers and its backlog per
    worker from the records."""
    oldest = queries.oldest_queued(now)
    serving = serving_workers(queries, now)
    for row in rows:
        _add_record_age(row, oldest, now)
        row.workers = serving.get(row.name, 0)
        if row.workers and row.visible is not None:
            row.backlog_per_worker = row.visible / row.workers


def _add_record_age(row: QueueSignals, oldest: dict[str, float], now: float) -> None:
    """Fill in the age of the queue's oldest waiting task (``oldest``: when each
    queue's became due); 0 for a queue with nothing waiting."""
    if row.name in oldest:
        row.oldest_age_sec, row.oldest_from = max(0.0, now - oldest[row.name]), 'records'
    elif row.visible == 0 and not row.delayed:
        row.oldest_age_sec, row.oldest_from = 0.0, 'records'


def _add_from_cloudwatch(rows: list[QueueSignals],
                         cloudwatch: Callable[[list[str]], dict[str, float]]) -> None:
    """Fill in the oldest message's age of each queue that exists, from ``cloudwatch``."""
    ages = cloudwatch([row.sqs_name for row in rows if row.visible is not None])
    for row in rows:
        if row.sqs_name in ages:
            row.oldest_age_sec, row.oldest_from = ages[row.sqs_name], 'cloudwatch'


def _cloudwatch(broker: Broker, now: float) -> Callable[[list[str]], dict[str, float]]:
    """CloudWatch's age of the oldest message at ``now``, by SQS name."""
    from kale.transport.cloudwatch import oldest_message_ages
    moment = datetime.datetime.fromtimestamp(now, datetime.timezone.utc)

    def cloudwatch(names: list[str]) -> dict[str, float]:
        assert broker.config is not None, 'a broker of an app'
        return oldest_message_ages(names, moment, config=broker.config)
    return cloudwatch
