"""Several deliveries of one task in one batch: run the most advanced, delete the rest.

At-least-once delivery puts more than one message of a task on a queue now
and then: a send whose answer was lost after SQS applied it is sent again
(same task id, same body), and a delete that failed leaves the original
beside its retry copy. When two such messages arrive in one batch, running
both would be a duplicate the worker can see coming; worse, releasing the
extra ones (a batch holds at most one message to run alone, see
:mod:`kale.worker.suspects`) sends fresh copies, which a further lost answer
doubles again, so the copies of one task can multiply faster than they run.

So before a batch runs, the messages carrying a task id already in the
batch are settled as :attr:`~kale.events.Outcome.DUPLICATE`: deleted unrun
(their payload object, shared with the copy that runs, is kept), with no
change to the task's record. The copy kept is the most advanced one: the
most failures, then the most retries, then the most deliveries left
unsettled, so a task's progress toward its retry limit or the dead-letter
queue is never set back.

FIFO queues are left alone: their deduplication already drops a second send
within five minutes, and their messages' order is their group's.
"""
from __future__ import annotations

from kale.codec.pipeline import FAILURE_NUM, RETRY_NUM
from kale.events import Outcome, Settlement
from kale.worker.batch import Batch, Opened

#: The reason of a delivery deleted because another copy of its task is in the batch.
DUPLICATE_IN_BATCH = 'another delivery of the task is in the same batch'
#: Each task id's most advanced message: its progress, and its message id.
_Kept = dict[str, tuple[tuple[int, int, int], str]]


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
    kept = _most_advanced(batch, decided)
    if len(kept) == sum(1 for m in batch.messages
                        if m.message_id in batch.opened and id(m) not in decided):
        return 0
    return _settle_others(batch, decided, kept)


def _one_message_per_task(batch: Batch) -> bool:
    """Whether the batch holds no two messages of one task (or may not drop any: FIFO)."""
    opened_by_id = batch.opened
    task_ids = batch.task_ids or [opened.task_id for opened in opened_by_id.values()]
    return batch.fifo or len(opened_by_id) < 2 or len(set(task_ids)) == len(opened_by_id)


def _most_advanced(batch: Batch, decided: set[int]) -> _Kept:
    """For each task id, the progress and message id of its most advanced
    message not decided yet."""
    opened_by_id = batch.opened
    kept: _Kept = {}
    for received in batch.messages:
        opened = opened_by_id.get(received.message_id)
        if opened is None or id(received) in decided:
            continue
        progress = _progress(opened)
        best = kept.get(opened.task_id)
        if best is None or progress > best[0]:
            kept[opened.task_id] = (progress, received.message_id)
    return kept


def _settle_others(batch: Batch, decided: set[int], kept: _Kept) -> int:
    """Settle as duplicates the undecided messages not kept; returns how many."""
    opened_by_id = batch.opened
    dropped = 0
    for received in batch.messages:
        opened = opened_by_id.get(received.message_id)
        if opened is None or id(received) in decided:
            continue
        if kept[opened.task_id][1] != received.message_id:
            batch.settlements.append(Settlement(
                received, Outcome.DUPLICATE, message=opened.message, reason=DUPLICATE_IN_BATCH,
                envelope=opened.envelope))
            dropped += 1
    return dropped
