"""Task records: every task's state, in a database of your choice.

Set ``RECORDS_URL`` (a SQLAlchemy URL; ``sqlite:///...`` for one machine,
``postgresql://...`` for a fleet) and Kale records every task: publishers
write ``queued``, workers every transition after it, on a thread of their
own (see :mod:`kale.records.hooks`). Read them back here::

    from kale import records

    task_id = MyTask.publish(None, 42, labels={'tenant': 't1'})
    records.get(task_id)                # a TaskRecord, or None
    records.wait(task_id, timeout=30)   # the finished record; TaskWaitTimeout
    records.result(task_id)             # what run_task returned (store_result = True)
    records.cancel(task_id)             # a task that has not started never will

``kale web`` serves the same over HTTP with a dashboard; ``kale tasks`` on
the command line. Needs ``pip install "kale-sqs[records]"``.
"""
from __future__ import annotations

import time
from typing import Any, Optional

from kale.exceptions import (
    DecodeError,
    RecordConflictError,
    RecordNotFoundError,
    TaskResultError,
    TaskWaitTimeout,
)
from kale.records.queries import Queries, TaskFilter
from kale.records.record import TaskRecord, WorkerRecord
from kale.records.recorder import get_recorder
from kale.records.schema import CANCELLED, FAILED, FINAL, PENDING, STATUSES, SUCCEEDED
from kale.records.store import RecordStore
from kale.registry import resolve_task

#: Longest pause between two reads while waiting for a task.
WAIT_POLL_MAX_SEC = 0.5


def store(url: Optional[str] = None) -> RecordStore:
    """The store on ``url`` (default RECORDS_URL), shared by this process."""
    return get_recorder(url).store


def queries(url: Optional[str] = None) -> Queries:
    return Queries(store(url))


def get(task_id: str, url: Optional[str] = None) -> Optional[TaskRecord]:
    """The task's record, or None. Records this process handed to its writer
    are written first, so a publisher reads its own tasks."""
    recorder = get_recorder(url)
    recorder.flush(timeout=1.0)
    row = recorder.store.get(task_id)
    return TaskRecord.from_row(row) if row is not None else None


def wait(task_id: str, timeout: float, url: Optional[str] = None) -> TaskRecord:
    """The task's record once it succeeded, failed for good or was cancelled;
    TaskWaitTimeout when it has not within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    pause = 0.02
    while True:
        record = get(task_id, url)
        if record is not None and record.finished:
            return record
        left = deadline - time.monotonic()
        if left <= 0:
            raise TaskWaitTimeout('task %s did not finish within %gs (it is %s)' % (
                task_id, timeout, record.status if record else 'not recorded'))
        time.sleep(min(pause, left))
        pause = min(pause * 2, WAIT_POLL_MAX_SEC)


def result(task_id: str, timeout: Optional[float] = None, url: Optional[str] = None) -> Any:
    """What the task's ``run_task`` returned (as stored: JSON-safe, bounded;
    the task needs ``store_result = True``). With ``timeout``, waits up to
    that many seconds for the task to finish (TaskWaitTimeout after).
    TaskResultError when it failed, was cancelled, has not finished, or its
    task class does not store results."""
    record = wait(task_id, timeout, url) if timeout is not None else get(task_id, url)
    if record is None:
        raise RecordNotFoundError('no record of task %s' % task_id)
    if record.status != SUCCEEDED:
        detail = ': %s: %s' % (record.error_type, record.error_message) \
            if record.error_type else ''
        raise TaskResultError('task %s has no result: it is %s%s'
                              % (task_id, record.status, detail))
    if record.result is None and not _stores_result(record.task):
        raise TaskResultError('task %s succeeded, but %s does not store its result: set '
                              'store_result = True on the task class' % (task_id, record.task))
    return record.result


def _stores_result(task_name: str) -> bool:
    """Whether the task class keeps what run_task returns (True when this
    process cannot import it: its result, None, is then taken as stored)."""
    try:
        return bool(resolve_task(task_name).store_result)
    except DecodeError:
        return True


def mark_purged(queue: str, before: float, url: Optional[str] = None) -> int:
    """Its queue was purged at ``before`` (epoch seconds): the queue's records
    that were queued or scheduled then become ``purged``; returns how many."""
    recorder = get_recorder(url)
    recorder.flush(timeout=1.0)
    return recorder.store.mark_purged(queue, before)


def cancel(task_id: str, url: Optional[str] = None) -> TaskRecord:
    """Cancel a task that has not started (queued, or scheduled for a retry):
    the worker that receives it deletes it unrun. Returns the record;
    RecordConflictError when it already runs or finished."""
    recorder = get_recorder(url)
    recorder.flush(timeout=1.0)
    if not recorder.store.cancel(task_id):
        found = recorder.store.get(task_id)
        if found is None:
            raise RecordNotFoundError('no record of task %s' % task_id)
        raise RecordConflictError('task %s cannot be cancelled: it is %s'
                                  % (task_id, found['status']))
    row = recorder.store.get(task_id)
    assert row is not None
    return TaskRecord.from_row(row)


def retry(task_id: str, url: Optional[str] = None) -> str:
    """Publish a failed (or cancelled) task again, with the arguments and
    labels in its record; returns the new task's id. RecordConflictError when
    it did not fail or its arguments were not stored whole."""
    from kale.registry import resolve_task
    record = get(task_id, url)
    if record is None:
        raise RecordNotFoundError('no record of task %s' % task_id)
    if record.status not in (FAILED, CANCELLED):
        raise RecordConflictError('task %s cannot be retried: it is %s, not failed'
                                  % (task_id, record.status))
    if not record.inputs or not record.inputs.get('exact'):
        raise RecordConflictError('task %s cannot be retried: its arguments were not stored '
                                  'whole (record_args = False, or too large)' % task_id)
    task_class = resolve_task(record.task)
    labels = dict(record.labels)
    labels['retry_of'] = task_id[:256]
    return task_class.publish(None, *record.inputs['args'], labels=labels,
                              **record.inputs['kwargs'])


__all__ = ['CANCELLED', 'FAILED', 'FINAL', 'PENDING', 'STATUSES', 'SUCCEEDED', 'Queries',
           'RecordStore', 'TaskFilter', 'TaskRecord', 'WorkerRecord', 'cancel', 'get',
           'mark_purged', 'queries', 'result', 'retry', 'store', 'wait']
