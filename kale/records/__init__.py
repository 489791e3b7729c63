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

import dataclasses
import itertools
import time
from typing import TYPE_CHECKING, Any, Optional

from kale.default import default_app
from kale.exceptions import (
    DecodeError,
    RecordConflictError,
    RecordNotFoundError,
    RecordsError,
    TaskResultError,
    TaskWaitTimeout,
)
from kale.internal import is_internal
from kale.records.queries import Queries, TaskFilter
from kale.records.recorder import OWN_WRITES_SEC, Recorder
from kale.records.retries import CLAIM_PREFIX, retry_once
from kale.statuses import FINAL_TASK as FINAL
from kale.statuses import PENDING_TASK as PENDING
from kale.statuses import TaskStatus
from kale.store import Store
from kale.store.record import TaskRecord, WorkerRecord
from kale.store.records import RecordQueries

if TYPE_CHECKING:
    from kale.app import App

SUCCEEDED, FAILED, CANCELLED = TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED
STATUSES = tuple(TaskStatus)

#: Longest pause between two reads while waiting for a task.
WAIT_POLL_MAX_SEC = 0.5


def recorder_for(app: Optional['App'] = None) -> Recorder:
    """The recorder of ``app`` (default: the default app)."""
    return (app or default_app()).recorder


def store(url: Optional[str] = None, app: Optional['App'] = None) -> Store:
    """The store of ``app`` (default: the default app) on its RECORDS_URL,
    or on ``url`` with its keys."""
    app = app or default_app()
    return app.store_at(url) if url else app.store


def queries(app: Optional['App'] = None) -> RecordQueries:
    """Questions about many records of ``app`` (default: the default app)."""
    return recorder_for(app).store.queries


def _flushed(app: Optional['App']) -> Recorder:
    """``app``'s recorder, once what this process handed its writers is written."""
    rec = recorder_for(app)
    rec.flush_process()
    return rec


def _read(rec: Recorder, task_id: str) -> Optional[TaskRecord]:
    row = rec.store.records.get(task_id)
    return TaskRecord.from_row(row, rec.store.sealer) if row is not None else None


def get(task_id: str, app: Optional['App'] = None) -> Optional[TaskRecord]:
    """The task's record, or None. Records this process handed to its writer
    are written first, so a publisher reads its own tasks."""
    return _read(_flushed(app), task_id)


def _found(task_id: str, app: Optional['App']) -> TaskRecord:
    record = get(task_id, app)
    if record is None:
        raise RecordNotFoundError('no record of task %s' % task_id)
    return record


#: The shortest id prefix :func:`resolve` looks up.
MIN_PREFIX_CHARS = 4


def resolve(id_or_prefix: str, app: Optional['App'] = None) -> str:
    """The full id of the task whose id is, or starts with, ``id_or_prefix``
    (as ``git`` takes a commit). RecordNotFoundError when none does,
    RecordConflictError when several do."""
    rec = _flushed(app)
    if rec.store.records.get(id_or_prefix) is not None:
        return id_or_prefix
    if len(id_or_prefix) < MIN_PREFIX_CHARS:
        raise RecordNotFoundError('no record of task %s' % id_or_prefix[:200])
    found = rec.store.queries.ids_with_prefix(id_or_prefix, 3)
    if not found:
        raise RecordNotFoundError('no record of task %s, nor of one whose id starts with it'
                                  % id_or_prefix[:200])
    if len(found) > 1:
        raise RecordConflictError('task id prefix %s is ambiguous: %s%s match; give more of the id'
                                  % (id_or_prefix[:200], ', '.join(found[:2]),
                                     ' and more' if len(found) > 2 else ''))
    return str(found[0])


def wait(task_id: str, timeout: float, app: Optional['App'] = None) -> TaskRecord:
    """The task's record once it succeeded, failed for good or was cancelled;
    TaskWaitTimeout when it has not within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    pause = 0.02
    while True:
        record = get(task_id, app)
        if record is not None and record.finished:
            return record
        left = deadline - time.monotonic()
        if left <= 0:
            raise TaskWaitTimeout('task %s did not finish within %gs (it is %s)' % (
                task_id, timeout, record.status if record else 'not recorded'))
        time.sleep(min(pause, left))
        pause = min(pause * 2, WAIT_POLL_MAX_SEC)


def result(task_id: str, timeout: Optional[float] = None, app: Optional['App'] = None) -> Any:
    """What the task's ``run_task`` returned (as stored: JSON-safe, bounded;
    the task needs ``store_result = True``). With ``timeout``, waits up to
    that many seconds for the task to finish (TaskWaitTimeout after).
    TaskResultError when it failed, was cancelled, has not finished, or its
    task class does not store results."""
    app = app or default_app()
    record = wait(task_id, timeout, app) if timeout is not None else _found(task_id, app)
    if record.status != SUCCEEDED:
        detail = ': %s: %s' % (record.error_type, record.error_message) \
            if record.error_type else ''
        raise TaskResultError('task %s has no result: it is %s%s'
                              % (task_id, record.status, detail))
    if record.result is None and not _stores_result(record.task, app):
        raise TaskResultError('task %s succeeded, but %s does not store its result: set '
                              'store_result = True on the task class' % (task_id, record.task))
    return record.result


def _stores_result(task_name: str, app: 'App') -> bool:
    """Whether the task class keeps what run_task returns (True when this
    process cannot import it: its result, None, is then taken as stored)."""
    try:
        return bool(app.registry.resolve(task_name).store_result)
    except DecodeError:
        return True


def mark_purged(queue: str, before: float, app: Optional['App'] = None) -> int:
    """Its queue was purged at ``before`` (epoch seconds): the queue's records
    that were queued or scheduled then become ``purged``; returns how many."""
    return _flushed(app).store.records.mark_purged(queue, before)


def cancel(task_id: str, app: Optional['App'] = None) -> TaskRecord:
    """Cancel a task that has not started (queued, or scheduled for a retry):
    the worker that receives it deletes it unrun. Returns the record;
    RecordConflictError when it already runs or finished."""
    rec = _flushed(app)
    cancelled = rec.store.records.cancel(task_id)
    record = _read(rec, task_id)
    if record is None:
        raise RecordNotFoundError('no record of task %s' % task_id)
    if not cancelled:
        raise RecordConflictError('task %s cannot be cancelled: it is %s' % (task_id, record.status))
    return record


def retry(task_id: str, app: Optional['App'] = None) -> str:
    """Publish a failed (or cancelled) task again, with the arguments and
    labels in its record; returns the new task's id. Once: retrying the same
    task again returns the id the first retry published. RecordConflictError
    when it did not fail or its arguments were not stored whole."""
    return retry_reporting(task_id, app)[0]


def retry_reporting(task_id: str, app: Optional['App'] = None) -> tuple[str, bool]:
    """:func:`retry`, also saying whether this call published (False: an
    earlier retry of the task did, and its id is returned)."""
    app = app or default_app()
    record = _found(task_id, app)
    if record.status not in (FAILED, CANCELLED):
        raise RecordConflictError('task %s cannot be retried: it is %s, not failed'
                                  % (task_id, record.status))
    if record.dead_of:
        raise RecordConflictError('task %s cannot be retried: it is the dead run of task %s '
                                  '(kale dlq redrive moves it back to run its handler again)'
                                  % (task_id, record.dead_of))
    if not record.inputs or not record.inputs.get('exact'):
        raise RecordConflictError('task %s cannot be retried: its arguments were not stored '
                                  'whole (record_args = False, or too large)' % task_id)
    if record.retried_as and not record.retried_as.startswith(CLAIM_PREFIX):
        return record.retried_as, False
    sealer = recorder_for(app).store.sealer
    sealer.check_inputs({'id': task_id, 'task': record.task, 'queue': record.queue,
                         'labels': record.labels,
                         'inputs': dict(record.inputs, mac=record.inputs_mac)})
    task_class = app.registry.resolve(record.task)
    if is_internal(task_class):
        raise RecordConflictError('task %s cannot be retried: %s is one of Kale\'s own tasks, '
                                  'published only by Kale' % (task_id, record.task))
    labels = dict(record.labels, retry_of=task_id[:256])
    inputs = record.inputs
    return retry_once(recorder_for(app).store.records, task_id, lambda: app.publisher.publish_batch(
        task_class, None, [(tuple(inputs['args']), dict(inputs['kwargs']))], labels=labels,
        queue_name=record.queue, task_ids=[sealer.retry_id(task_id)])[0])


#: Tasks one bulk retry publishes again, at most.
BULK_RETRY_MAX = 1000


def retry_matching(where: TaskFilter, app: Optional['App'] = None,
                   limit: int = BULK_RETRY_MAX) -> dict[str, Any]:
    """Retry every failed task ``where`` matches (and cancelled ones, when
    its status filter names them), each once, at most ``limit``: what was
    published, how many had been retried before, and what was refused."""
    statuses = set(where.statuses) & {FAILED, CANCELLED} or {FAILED}
    where = dataclasses.replace(where, statuses=tuple(sorted(statuses)))
    published, earlier, refused = [], 0, []
    for record in itertools.islice(queries(app).iterate(where), limit):
        try:
            new_id, new = retry_reporting(record.id, app)
        except RecordsError as exc:
            refused.append({'id': record.id, 'error': str(exc)})
            continue
        if new:
            published.append({'id': new_id, 'retry_of': record.id})
        else:
            earlier += 1
    recorder_for(app).flush(timeout=OWN_WRITES_SEC)
    return {'published': published, 'already_retried': earlier, 'refused': refused}


def attempts(task_id: str, app: Optional['App'] = None) -> list[dict[str, Any]]:
    """Every attempt of the task, oldest first: those that failed and were
    retried (each with its retry's delay, ``retry_delay_sec``), then its last
    (from its record, if it started)."""
    record = _found(task_id, app)
    found = recorder_for(app).store.records.attempts(task_id)
    if record.started_at is not None:
        retried = [a.get('retry_delay_sec') for a in found if a['attempt'] == record.attempts]
        found = [a for a in found if a['attempt'] != record.attempts] + [{
            'task_id': task_id, 'attempt': record.attempts, 'status': record.status,
            'started_at': record.started_at, 'finished_at': record.finished_at,
            'duration_sec': record.duration_sec, 'worker': record.worker,
            'error_type': record.error_type, 'error_message': record.error_message,
            'retry_delay_sec': retried[0] if retried else None}]
    return found


__all__ = ['CANCELLED', 'FAILED', 'FINAL', 'PENDING', 'STATUSES', 'SUCCEEDED', 'Queries',
           'TaskFilter', 'TaskRecord', 'WorkerRecord', 'attempts', 'cancel', 'get', 'mark_purged',
           'queries', 'resolve', 'result', 'retry', 'retry_matching', 'retry_reporting', 'store',
           'wait']
