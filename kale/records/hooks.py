"""The records' hooks: publishers and workers hand the rows of their tasks'
transitions to the writer thread, never waiting for the store. Only verified
messages are recorded. How: docs/explanation/internals-records.md."""
from __future__ import annotations

import itertools
import logging
import time
from typing import TYPE_CHECKING, Any, Collection, Mapping, Optional, Sequence

from kale.events import Outcome, process_identity
from kale.hooks import PublishHooks, WorkerHooks
from kale.records.recorder import OWN_WRITES_SEC, Recorder
from kale.records.render import error_fields, render_inputs, render_result
from kale.records.writer import LaterRow, Row
from kale.statuses import TaskStatus
from kale.store.records import KEPT_COLUMNS, TASK_COLUMNS

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from kale.app import App
    from kale.events import Settlement
    from kale.message import Message
    from kale.publisher import Publication
    from kale.queue_config import TaskQueue
    from kale.transport import ReceivedMessage
    from kale.worker.batch import Batch

CANCELLED, DEDUPLICATED, FAILED = TaskStatus.CANCELLED, TaskStatus.DEDUPLICATED, TaskStatus.FAILED
QUEUED, RUNNING, SCHEDULED = TaskStatus.QUEUED, TaskStatus.RUNNING, TaskStatus.SCHEDULED
SUCCEEDED = TaskStatus.SUCCEEDED
#: Every column a worker's event sets (a snapshot, so events can be merged).
EVENT_COLUMNS = tuple(name for name in TASK_COLUMNS
                      if name not in ('labels', 'inputs') + KEPT_COLUMNS)
#: An event row before its values are set: copying it keeps the column order
#: every event shares (the writer compiles one statement for that order).
_EVENT_TEMPLATE: Row = dict.fromkeys(EVENT_COLUMNS)


def publication_rows(publication: 'Publication', limit: int, now: float) -> list[Row]:
    """The ``queued`` records of a publication's tasks (with their SQS
    message ids once sent); ``scheduled`` with their due time for a wait
    past SQS's delay (:mod:`kale.delays`)."""
    task_class = publication.task_class
    keep_inputs = getattr(task_class, 'record_args', True)
    name, queue = task_class.task_path(), publication.queue.name
    next_at = now + publication.delay_sec if publication.delay_sec else None
    status = QUEUED
    if publication.due_at is not None:
        next_at, status = publication.due_at, SCHEDULED
    return [{
        'id': message.task_id, 'task': name, 'queue': queue, 'status': status,
        'attempts': 0, 'labels': own_labels or None,
        'inputs': render_inputs(message.args, message.kwargs, limit) if keep_inputs else None,
        # The columns a new task has no value for yet are left out:
        # they are written as null, with fewer values to bind.
        'published_at': message.sent_at or now, 'next_attempt_at': next_at,
        # As old as the send itself: a worker may run the task and
        # record its end before this publish's bookkeeping is done,
        # and that event must stay the newer one.
        'message_id': message_id, 'updated_at': message.sent_at or now}
        for message, own_labels, message_id in itertools.zip_longest(
            publication.messages, publication.labels or (), publication.message_ids or ())]


def dead_run_rows(queue: 'TaskQueue', dead_runs: Sequence[tuple[Any, 'Message']],
                  limit: int) -> list[Row]:
    """The ``queued`` records of the dead runs sent for tasks (class, dead run)
    that failed for good, each linked to its task (``dead_of``), on the queue's
    dead-run queue."""
    return [{
        'id': run.task_id, 'task': run.task_name, 'queue': queue.dead_run_queue,
        'status': QUEUED, 'attempts': 0, 'labels': None,
        'inputs': render_inputs(run.args, run.kwargs, limit)
        if getattr(task, 'record_args', True) else None,
        'published_at': run.sent_at, 'next_attempt_at': None, 'message_id': None,
        'dead_of': run.dead_of, 'updated_at': run.sent_at} for task, run in dead_runs]


def mark_deduplicated(recorder: Recorder, rows: list[dict[str, Any]], now: float) -> None:
    """FIFO: SQS answers a publish it deduplicated with the message id of the
    task it kept: such a row is ``deduplicated``, pointing at that task,
    not ``queued`` for ever."""
    recorder.flush(timeout=OWN_WRITES_SEC)
    owners = recorder.store.records.message_owners([row['message_id'] for row in rows],
                                           not_ids=[row['id'] for row in rows])
    for row in rows:
        original = owners.get(row['message_id'])
        if original is not None:
            row.update(status=DEDUPLICATED, duplicate_of=original, finished_at=now,
                       message_id=None)


class RecordsHooks(PublishHooks, WorkerHooks):
    """Writes task records and this process's row (docs/explanation/internals-records.md)."""

    def __init__(self, recorder: Recorder):
        #: Whose records: its app's recorder (its store and records settings).
        self.recorder = recorder
        self._worker = process_identity()[0]       # as its row in kale_workers has it
        #: receipt handle -> when its task started here, until its batch is reported
        #: (keyed by receive: the next attempt of a task may start here before the
        #: batch of the one before is reported)
        self._started: dict[str, float] = {}
        #: Receipt handles whose outcome was handed over before the settle.
        self._written_early: set[str] = set()

    @classmethod
    def for_app(cls, app: 'App') -> 'RecordsHooks':
        """The hooks of ``app``, on its recorder."""
        return cls(app.recorder)

    # --- publishing ---------------------------------------------------------------

    def after_publish(self, publication: 'Publication') -> None:
        if publication.error is not None or publication.deferred:
            return      # a deferred publication is recorded by whatever sends it (the relay)
        recorder = self.recorder
        now = time.time()
        rows = publication_rows(publication, recorder.max_value_chars, now)
        if publication.queue.fifo and publication.message_ids:
            mark_deduplicated(recorder, rows, now)
        recorder.writer.publish(rows)

    def claim_unique(self, claims: Sequence[tuple[str, str]],
                     for_sec: float) -> Optional[list[str]]:
        return self.recorder.store.unique.claim(claims, time.time(), for_sec)

    def release_unique(self, claims: Sequence[tuple[str, str]]) -> None:
        if claims:
            self.recorder.store.unique.release(claims)

    # --- the worker's process ---------------------------------------------------------

    def on_worker_startup(self, worker: Any) -> None:
        """Its row; what operators ask of it is read with its heartbeat and
        handed to its ``obey`` (:mod:`kale.worker.control`)."""
        queues = [queue.name for queue in getattr(worker, 'queues', ())]
        self.recorder.start_process('worker', queues, purges=True,
                                    control=getattr(worker, 'obey', None))

    def on_worker_shutdown(self, worker: Any) -> None:
        self.recorder.stop_process()

    def on_supervisor_startup(self, supervisor: Any) -> None:
        self.recorder.start_process('supervisor', getattr(supervisor, 'queue_names', ()),
                                    purges=False, control=getattr(supervisor, 'obey', None))

    def on_supervisor_shutdown(self, supervisor: Any) -> None:
        self.recorder.stop_process()

    # --- tasks ----------------------------------------------------------------------------

    def cancelled_tasks(self, queue: 'TaskQueue', task_ids: Sequence[str]) -> Collection[str]:
        return self.recorder.cancelled_among(task_ids)

    def succeeded_tasks(self, queue: 'TaskQueue', task_ids: Sequence[str]) -> Collection[str]:
        return self.recorder.succeeded_among(task_ids)

    def tasks_due_after(self, after: float) -> Optional[Mapping[str, tuple[int, float]]]:
        """From the records (None when they cannot be read)."""
        self.recorder.flush(timeout=OWN_WRITES_SEC)     # this worker's own retries too
        try:
            return self.recorder.store.queries.scheduled_after(after)
        except Exception as exc:
            logger.warning('records: cannot read the tasks due later: %s', exc)
            return None

    def on_task_started(self, queue: 'TaskQueue', received: 'ReceivedMessage',
                        message: 'Message') -> None:
        now = time.time()
        self._started[received.receipt_handle] = now
        recorder = self.recorder
        if recorder.row is not None:
            recorder.row.current = (message.task_id, message.task_name)
            recorder.row.dirty = True
        # Built on the writer thread, and only if the task still runs when it
        # gets there: most tasks end before, and their outcome says all.
        recorder.writer.running(received.receipt_handle, LaterRow(
            message.task_id, now, self._running_row,
            (message.task_id, message.task_name, queue.name,
             message.published_at or message.sent_at, message.attempt, now, message.dead_of)))

    def on_task_finished(self, settlement: 'Settlement') -> None:
        recorder = self.recorder
        recorder.writer.running(settlement.received.receipt_handle, None)
        row = recorder.row
        if row is not None:
            row.current = None
            row.dirty = True

    def _running_row(self, task_id: str, task_name: str, queue: str, published_at: float,
                     attempts: int, now: float, dead_of: str = '') -> Row:
        row = self._event(task_id, task_name, queue, published_at, attempts, RUNNING, now)
        row['started_at'] = now
        if dead_of:
            row['dead_of'] = dead_of
        return row

    def before_settle(self, queue: 'TaskQueue', batch: 'Batch') -> None:
        """Write each outcome before its message is deleted (waiting up to
        RECORDS_SETTLE_WAIT_SEC): a worker killed between the delete and the
        write would leave the record behind what happened, for good."""
        recorder = self.recorder
        if recorder.settle_wait_sec <= 0:
            return
        later = self._outcome_rows(queue, batch, early=True)
        if not later:
            return
        writer = recorder.writer
        writer.event(later)
        # Not while the store is down, and never past the batch's budget (a
        # message must not come back because its record was slow): what the
        # store did not take in time is kept on disk before the delete.
        wait = min(recorder.settle_wait_sec, batch.deadline - time.monotonic() - 1.0)
        if wait > 0 and not writer.down and writer.flush(timeout=wait):
            recorder.spool.written()       # all handed over so far is in the store
            return
        recorder.keep_on_disk(later)

    def after_batch(self, queue: 'TaskQueue', batch: 'Batch') -> None:
        """Hand each outcome not written before the settle to the writer, which
        builds its row (a result, a traceback) on its own thread."""
        recorder = self.recorder
        later = self._outcome_rows(queue, batch, early=False)
        process = recorder.row
        if process is not None and batch.settlements:
            process.counts.update(s.outcome.value for s in batch.settlements)
            process.dirty = True
        if later:
            recorder.writer.event(later)
        dead_runs = [(s.task, s.dead_run) for s in batch.settlements
                     if s.dead_run is not None and s.settled]
        if dead_runs:
            recorder.writer.publish(dead_run_rows(queue, dead_runs, recorder.max_value_chars))

    def _outcome_rows(self, queue: 'TaskQueue', batch: 'Batch', early: bool) -> list[LaterRow]:
        """The rows of the batch's outcomes, before the settle (``early``) or after it."""
        later = []
        for s in batch.settlements:
            started_at = self._start_of(s, early)
            if started_at is _SKIP:
                continue
            status = s.outcome.record_status
            if started_at is None and (status == QUEUED or s.outcome is Outcome.SKIPPED
                                       or s.outcome is Outcome.WAITING):
                # Released, a duplicate skipped, or sent on before its due
                # time, unstarted: no change (a waiting task stays scheduled
                # from its publish; an event here could hide a cancel).
                continue
            if early:
                self._written_early.add(s.received.receipt_handle)
            # The event's time is when its run ended, not when the batch is
            # reported: another worker may already have run the retry copy and
            # recorded its outcome, which must stay the newer one.
            at = started_at + s.duration_sec if started_at is not None else time.time()
            later.append(self._later_row(queue.name, s, status, started_at, at))
        return later

    def _start_of(self, s: 'Settlement', early: bool) -> Any:
        """When the settlement's run started (None: it did not), or _SKIP when
        its row is not for this call (unverified, unsettled, or written early)."""
        handle = s.received.receipt_handle
        if early:
            if not s.verified or handle in self._written_early:
                return _SKIP
            return self._started.get(handle)
        started_at = self._started.pop(handle, None)
        if handle in self._written_early:
            self._written_early.discard(handle)
            return _SKIP
        return started_at if s.settled and s.verified else _SKIP

    def _later_row(self, queue: str, s: 'Settlement', status: str, started_at: Optional[float],
                   at: float) -> LaterRow:
        """The row to build on the writer's thread."""
        message = s.message
        if status == SUCCEEDED and message is not None and not message.dead_of \
                and (s.task is None or not s.task.store_result):
            # The usual outcome is handed over as values alone: holding the
            # settlement (its message, body and task) until the writer's
            # round would keep all of it alive for the garbage collector to
            # walk again and again.
            return LaterRow(message.task_id, at, self._succeeded_row, (
                queue, message.task_id, message.task_name, message.attempt,
                message.published_at or message.sent_at, started_at, at, s.duration_sec))
        return LaterRow(s.task_id, at, self._outcome_row, (queue, s, status, started_at, at),
                        ends_attempt=status == SCHEDULED and started_at is not None)

    def _outcome_row(self, queue: str, s: 'Settlement', status: str,
                     started_at: Optional[float], now: float) -> Row:
        """The row of a settled message's outcome (built on the writer thread)."""
        task_id, task_name, attempts, published = _identity(s, now)
        if status == SUCCEEDED:       # one with a result to store, or known by its envelope
            row = self._succeeded_row(queue, task_id, task_name, attempts, published, started_at,
                                      now, s.duration_sec)
            if s.task is not None and getattr(s.task, 'store_result', False):
                row['result'] = render_result(s.result, self.recorder.max_value_chars)
        else:
            if status == CANCELLED:
                attempts -= 1
            row = self._event(task_id, task_name, queue, published, attempts, status, now)
            _ending(row, s, status, started_at, now)
            dead_of = s.envelope.dead_of if s.envelope is not None else ''
            if dead_of:             # a dead run's row, if this event is the first written
                row['dead_of'] = dead_of
        stderr = getattr(s.task, 'stderr', None) if s.task is not None else None
        if stderr is not None and status in _WITH_STDERR:
            row['stderr'] = stderr
        return row

    def _succeeded_row(self, queue: str, task_id: str, task_name: str, attempts: int,
                       published: float, started_at: Optional[float], now: float,
                       duration_sec: float) -> Row:
        """The row of a task that succeeded; the columns it leaves out are
        written as null (fewer values to bind for the most common statement)."""
        return {'id': task_id, 'task': task_name, 'queue': queue, 'status': SUCCEEDED,
                'attempts': attempts, 'published_at': published or now, 'started_at': started_at,
                'finished_at': now,
                'duration_sec': round(duration_sec, 6) if started_at else None,
                'worker': self._worker, 'updated_at': now}

    def _event(self, task_id: str, task_name: str, queue: str, published_at: float,
               attempts: int, status: str, now: float) -> Row:
        row = _EVENT_TEMPLATE.copy()
        row['id'], row['task'], row['queue'] = task_id, task_name, queue
        row['status'], row['attempts'] = status, attempts
        row['published_at'] = published_at or now
        row['worker'], row['updated_at'] = self._worker, now
        return row


#: The statuses whose row keeps an executor's stderr.
_WITH_STDERR = (SUCCEEDED, SCHEDULED, FAILED)
#: What _start_of gives for a settlement whose row is not for this call.
_SKIP = object()


def _identity(s: 'Settlement', now: float) -> tuple[str, str, int, float]:
    """A settlement's task id, task name, attempt and publish time."""
    message = s.message
    if message is not None:
        return (message.task_id, message.task_name, message.attempt,
                message.published_at or message.sent_at)
    published = s.envelope.published_at if s.envelope is not None else now
    return s.task_id, s.task_name, 1, published


def _ending(row: Row, s: 'Settlement', status: str, started_at: Optional[float],
            now: float) -> None:
    """What a cancel, a retry (a delayed copy, or a FIFO message held
    invisible) or a failure adds to its event's row."""
    if status == CANCELLED:
        row['finished_at'] = now
    if status not in (SCHEDULED, FAILED):
        return
    row['started_at'] = started_at
    row['duration_sec'] = round(s.duration_sec, 6) if started_at else None
    if status == SCHEDULED:
        row['next_attempt_at'] = now + s.retry_delay_sec
    else:
        row['finished_at'] = now
        row['dead_letter_reason'] = s.reason[:512] or None
    row.update(error_fields(s.exception, s.reason))
