"""Operator actions on queues: inspect, purge, redrive dead letters, publish by path.

The ``kale queues``, ``kale purge``, ``kale dlq redrive`` and ``kale publish``
commands are thin wrappers around these functions.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Callable, Optional, Sequence

from kale.broker import Broker
from kale.codec import get_codec
from kale.exceptions import (
    BatchSendError,
    DecodeError,
    NoDeadLetterQueueError,
    PublishError,
    QueueNotFoundError,
    UnknownTaskPathError,
)
from kale.message import publisher_identity
from kale.queue_config import TaskQueue
from kale.registry import resolve_task
from kale.transport import MAX_BATCH_ENTRIES, ReceivedMessage, VisibilityChange

logger = logging.getLogger(__name__)

#: Seconds a dead letter being redriven stays invisible to other readers.
REDRIVE_VISIBILITY_SEC = 120


@dataclasses.dataclass(frozen=True)
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
    broker.transport.purge(name)
    return name


@dataclasses.dataclass
class RedriveReport:
    moved: int = 0
    skipped: int = 0             # could not be decoded: left in the dead-letter queue
    skipped_reasons: dict[str, int] = dataclasses.field(default_factory=dict)


def redrive(broker: Broker, queue: TaskQueue, limit: Optional[int] = None,
            progress: Callable[[RedriveReport], None] = lambda report: None) -> RedriveReport:
    """Move dead letters back to their queue with retry and failure counts reset.

    Each batch's copies are sent before its originals are deleted, so an
    interruption can duplicate a task but never lose one. Dead letters that
    cannot be decoded (bad signature, not Kale's) stay where they are.
    """
    dead_name = _dead_letter_name(broker, queue)
    report = RedriveReport()
    skipped_handles: list[str] = []
    try:
        while limit is None or report.moved < limit:
            wanted = MAX_BATCH_ENTRIES if limit is None \
                else min(MAX_BATCH_ENTRIES, limit - report.moved)
            batch = broker.transport.receive(dead_name, wanted, 1, REDRIVE_VISIBILITY_SEC)
            if not batch:
                break
            _redrive_batch(broker, queue, dead_name, batch, report, skipped_handles)
            progress(report)
    finally:
        if skipped_handles:
            broker.transport.change_visibility_batch(
                dead_name, [VisibilityChange(handle, 0) for handle in skipped_handles])
    return report


def _redrive_batch(broker: Broker, queue: TaskQueue, dead_name: str,
                   batch: Sequence[ReceivedMessage], report: RedriveReport,
                   skipped_handles: list[str]) -> None:
    movable, copies = [], []
    codec = get_codec()
    for received in batch:
        try:
            message = codec.decode(received.body)
        except DecodeError as exc:
            report.skipped += 1
            report.skipped_reasons[exc.reason] = report.skipped_reasons.get(exc.reason, 0) + 1
            skipped_handles.append(received.receipt_handle)
            continue
        fresh = dataclasses.replace(message, retry_num=0, failure_num=0, enqueued_at=time.time(),
                                    publisher=publisher_identity())
        copies.append(codec.to_outgoing(fresh))
        movable.append(received)
    if not copies:
        return
    try:
        broker.send(queue, copies)
    except BatchSendError as exc:      # delete only what was copied, then report
        _delete_moved(broker, dead_name, [m for i, m in enumerate(movable)
                                          if i not in exc.failed], report)
        raise
    _delete_moved(broker, dead_name, movable, report)


def _delete_moved(broker: Broker, dead_name: str, moved: Sequence[ReceivedMessage],
                  report: RedriveReport) -> None:
    if not moved:
        return
    failed = set(broker.transport.delete_batch(dead_name, [m.receipt_handle for m in moved]))
    if failed:
        logger.warning('%d redriven dead letters could not be deleted and may be redriven again',
                       len(failed))
    report.moved += len(moved)


def publish_by_path(task_path: str, args: Sequence[Any], kwargs: dict[str, Any],
                    delay_sec: float = 0, app_data: Any = None) -> str:
    """Publish the task class at ``task_path``; returns its task id."""
    if 'delay_sec' in kwargs:
        raise PublishError('delay_sec is not passed to tasks; give the delay with --delay')
    try:
        task_class = resolve_task(task_path)
    except DecodeError:
        raise UnknownTaskPathError(
            '%r is not an importable kale Task class (give module.ClassName, importable from '
            'the current directory)' % task_path) from None
    return task_class.publish(app_data, *args, delay_sec=delay_sec, **kwargs)
