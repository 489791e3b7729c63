"""Several deliveries of one task in one batch: run the most advanced, delete the
rest (docs/explanation/internals-worker.md, "Duplicates in a batch").
"""
from __future__ import annotations

from kale.codec.pipeline import FAILURE_NUM, RETRY_NUM
from kale.events import Outcome, Settlement
from kale.transport import ReceivedMessage
from kale.worker.batch import Batch, Opened

#: The reason of a delivery deleted because another copy of its task is in the batch.
DUPLICATE_IN_BATCH = 'another delivery of the task is in the same batch'


def _progress(opened: Opened) -> tuple[int, int, int]:
    """How far this copy of the task has come: failures, retries, unsettled deliveries."""
    if opened.message is not None:
        message = opened.message
        return message.failure_num, message.retry_num, message.unsettled
    headers = opened.envelope.headers
    return (_number(headers.get(FAILURE_NUM)), _number(headers.get(RETRY_NUM)),
            opened.envelope.unsettled)


def _number(value: object) -> int:
    text = str(value or '0')
    return int(text) if text.isdigit() else 0


def drop_duplicates(batch: Batch) -> int:
    """Settle as duplicates the messages whose task id another, more
    advanced message of the batch carries; returns how many."""
    if _one_message_per_task(batch):
        return 0        # the usual case: one message per task
    decided = {id(s.received) for s in batch.settlements}
    undecided = [(received, batch.opened[received.message_id]) for received in batch.messages
                 if received.message_id in batch.opened and id(received) not in decided]
    kept = _most_advanced(undecided)
    dropped = [(received, opened) for received, opened in undecided
               if kept[opened.task_id] != received.message_id]
    for received, opened in dropped:
        batch.settlements.append(Settlement(
            received, Outcome.DUPLICATE, message=opened.message, reason=DUPLICATE_IN_BATCH,
            envelope=opened.envelope))
    return len(dropped)


def _one_message_per_task(batch: Batch) -> bool:
    """Whether the batch holds no two messages of one task (or may not drop any: FIFO)."""
    opened_by_id = batch.opened
    task_ids = batch.task_ids or [opened.task_id for opened in opened_by_id.values()]
    return batch.fifo or len(opened_by_id) < 2 or len(set(task_ids)) == len(opened_by_id)


def _most_advanced(undecided: list[tuple[ReceivedMessage, Opened]]) -> dict[str, str]:
    """Each task id's most advanced message (by its id)."""
    kept: dict[str, tuple[tuple[int, int, int], str]] = {}
    for received, opened in undecided:
        progress = _progress(opened)
        best = kept.get(opened.task_id)
        if best is None or progress > best[0]:
            kept[opened.task_id] = (progress, received.message_id)
    return {task_id: message_id for task_id, (_, message_id) in kept.items()}
