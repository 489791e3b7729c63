"""The task records' facet of a store: the tasks' rows, their attempts, the
workers' rows (``store.records``), and the questions about many of them
(``store.queries``); the two rules of their writes: docs/explanation/internals-store.md."""
from __future__ import annotations

import functools
from typing import Any, Callable, Iterator, Optional, Protocol, Sequence

from kale.exceptions import BadFilterError
from kale.statuses import PENDING_FILTER, TaskStatus, WorkerState, WorkflowStatus, status_values
from kale.store.record import TaskFilter, TaskRecord, WorkerRecord, encode_cursor, iso

Row = dict[str, Any]

#: The columns of a task's row.
TASK_COLUMNS = ('id', 'task', 'queue', 'status', 'attempts', 'labels', 'inputs', 'published_at',
                'started_at', 'finished_at', 'next_attempt_at', 'duration_sec', 'worker',
                'error_type', 'error_message', 'error_traceback', 'dead_letter_reason', 'result',
                'message_id', 'duplicate_of', 'retried_as', 'stderr', 'dead_of', 'updated_at')
#: Columns a publisher fills in and a worker never changes (a dead run's
#: ``dead_of`` is published by the worker that sent it).
PUBLISHED_COLUMNS = ('task', 'queue', 'labels', 'inputs', 'published_at', 'message_id',
                     'dead_of')
#: Columns no worker's event changes.
KEPT_COLUMNS = ('message_id', 'duplicate_of', 'retried_as', 'dead_of')
#: The columns a worker's event sets (on a database, those a new life of an id takes too).
EVENT_COLUMNS = tuple(name for name in TASK_COLUMNS
                      if name not in PUBLISHED_COLUMNS + KEPT_COLUMNS and name != 'id')


def retried_attempts(events: Sequence[Row]) -> list[Row]:
    """History rows for the events that end a run with a retry, each with
    the retry's delay (its ``next_attempt_at`` less the event's time)."""
    return [{'task_id': row['id'], 'attempt': row.get('attempts') or 0,
             'status': TaskStatus.FAILED, 'started_at': row['started_at'],
             'finished_at': row.get('updated_at'), 'duration_sec': row.get('duration_sec'),
             'worker': row.get('worker'), 'error_type': row.get('error_type'),
             'error_message': row.get('error_message'),
             'retry_delay_sec': _delay(row)}
            for row in events if row.get('status') == TaskStatus.SCHEDULED
            and row.get('started_at')]


def _delay(event: Row) -> Optional[float]:
    """Seconds from a retried run's event to its next attempt (None if unknown)."""
    due, at = event.get('next_attempt_at'), event.get('updated_at')
    return round(max(due - at, 0.0), 3) if due is not None and at is not None else None


def rows_to_write(sealer: Any, published: Sequence[Row], events: Sequence[Row],
                  attempt_rows: Optional[Sequence[Row]],
                  sealed: bool) -> tuple[Sequence[Row], Sequence[Row], Sequence[Row]]:
    """What a store's :meth:`RecordsStore.write` writes: the attempts' rows (by
    default the events' retries'), and every row as the database may hold it,
    unless the caller made them so (``sealed``)."""
    if attempt_rows is None:
        attempt_rows = retried_attempts(events)
    if sealed:
        return published, events, attempt_rows
    published = [sealer.stored(row, published=True) for row in published]
    if sealer.sealing or sealer.dropping:
        events = [sealer.stored(row) for row in events]
        attempt_rows = [sealer.stored(row) for row in attempt_rows]
    return published, events, attempt_rows


#: The statuses of the ended tasks that each TTL of
#: :meth:`RecordsStore.purge_expired` applies to (``succeeded_ttl``, then
#: ``failed_ttl``), and of the ended workflows.
ENDED_TASKS = ((TaskStatus.SUCCEEDED,), (TaskStatus.FAILED, TaskStatus.CANCELLED,
                                          TaskStatus.PURGED, TaskStatus.DEDUPLICATED))
ENDED_WORKFLOWS = ((WorkflowStatus.SUCCEEDED,), (WorkflowStatus.FAILED, WorkflowStatus.CANCELLED))


def expired(ended: Sequence[tuple[str, ...]], succeeded_ttl: Optional[float],
            failed_ttl: Optional[float], now: float) -> list[tuple[tuple[str, ...], float]]:
    """(statuses, finished before) of the rows ``ended`` past their TTL, one per TTL given."""
    ttls = (succeeded_ttl, failed_ttl)
    return [(statuses, now - ttl) for statuses, ttl in zip(ended, ttls, strict=True) if ttl is not None]


#: Statuses of the tasks that wait for a worker: a cancel, or their queue's purge, ends them.
WAITING = (TaskStatus.QUEUED, TaskStatus.SCHEDULED)


def ended_waiting(status: str, now: float) -> Row:
    """What a waiting task that ends unrun with ``status`` at ``now`` changes."""
    return {'status': status, 'finished_at': now, 'next_attempt_at': None, 'updated_at': now}


#: Statuses a worker ends a task with (the timeline's; a purge or a
#: deduplication is not a run).
RAN = (TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED)

Page = tuple[list[TaskRecord], Optional[str]]


def page_of(records: list[TaskRecord], limit: int) -> Page:
    """A page of the ``limit + 1`` records read: the first ``limit``, and the next page's cursor."""
    found = records[:limit]
    return found, encode_cursor(found[-1]) if len(records) > limit and found else None


class DerivedQueries:
    """The questions of :class:`RecordQueries` that every store answers from its others."""

    page: Callable[..., Page]
    summary: Callable[[TaskFilter], dict[str, Any]]

    def iterate(self, where: TaskFilter, page_size: int = 500) -> Iterator[TaskRecord]:
        """Every matching record, newest first, a page at a time."""
        cursor: Optional[str] = None
        while True:
            rows, cursor = self.page(where, page_size, cursor)
            yield from rows
            if cursor is None:
                return

    def counts_by_status(self) -> dict[str, int]:
        """Every record counted by status (each status present, 0 when none)."""
        counts: dict[str, int] = self.summary(TaskFilter())['by_status']
        counts.pop(PENDING_FILTER)
        return counts


#: A timeline's buckets start at the same times for every task: each is written once.
_bucket_start = functools.lru_cache(maxsize=8192)(iso)


def timeline_point(start: float, point: dict[str, Any]) -> dict[str, Any]:
    """A timeline bucket as the API gives it: start, counts by status, mean duration."""
    timed = point.pop('timed')
    total = point.pop('duration_sum')
    return {'t': _bucket_start(start), **point,
            'mean_duration_sec': round(total / timed, 6) if timed else None}


Series = dict[str, dict[int, dict[str, Any]]]


def series_answer(bucket_sec: int, series: Series) -> dict[str, list[dict[str, Any]]]:
    """Each series' buckets in order, as the API gives them."""
    return {name: [timeline_point(number * bucket_sec, point)
                   for number, point in sorted(points.items())]
            for name, points in sorted(series.items())}


def timeline_answer(window_sec: float, bucket_sec: int, series: Series,
                    last_minute: dict[str, int]) -> dict[str, Any]:
    """The timeline as the API gives it (see :meth:`RecordQueries.timeline`)."""
    return {'bucket_sec': bucket_sec, 'window_sec': window_sec,
            'series': series_answer(bucket_sec, series), 'queues_last_minute': last_minute}


#: What the activity's series are kept by.
ACTIVITY_BY = ('queue', 'task')


def check_activity_by(by: str) -> None:
    if by not in ACTIVITY_BY:
        raise BadFilterError('by must be one of %s, got %r' % (', '.join(ACTIVITY_BY), by))


def add_runs(series: Series, name: str, number: float, outcome: str, n: int,
             mean: Optional[float]) -> None:
    """Count ``n`` runs of ``outcome`` (a status, or ``retried``) in a bucket
    of the activity, with their mean duration (None: untimed)."""
    point = series.setdefault(name, {}).setdefault(int(number), {
        **{ran.value: 0 for ran in RAN}, 'retried': 0, 'duration_sum': 0.0, 'timed': 0})
    point[outcome] += n
    if mean is not None and outcome != TaskStatus.CANCELLED:
        point['duration_sum'] += float(mean) * n
        point['timed'] += n


def activity_answer(by: str, window_sec: float, bucket_sec: int, series: Series) -> dict[str, Any]:
    """The activity as the API gives it: each series' buckets in order."""
    return {'by': by, 'bucket_sec': bucket_sec, 'window_sec': window_sec,
            'series': series_answer(bucket_sec, series)}


def check_worker_state(state: Optional[str]) -> None:
    if state is not None and state not in status_values(WorkerState):
        raise BadFilterError('unknown worker state %r: use one of %s'
                             % (state, ', '.join(status_values(WorkerState))))


def workers_in_order(found: list[WorkerRecord]) -> list[WorkerRecord]:
    """Running first, then lost, then stopped; newest first."""
    order = {WorkerState.RUNNING: 0, WorkerState.LOST: 1, WorkerState.STOPPED: 2}
    return sorted(found, key=lambda w: (order[WorkerState(w.state)], -w.started_at))


class RecordsStore(Protocol):
    """Rows of tasks, attempts and workers (``store.records``)."""

    def write(self, published: Sequence[Row], events: Sequence[Row], worker_rows: Sequence[Row],
              attempt_rows: Optional[Sequence[Row]] = None, sealed: bool = False) -> None:
        """Publications, events, worker rows and failed attempts, in one transaction."""

    def get(self, task_id: str) -> Optional[Row]:
        """The task's row (its values as stored), None when there is none."""

    def attempts(self, task_id: str) -> list[Row]:
        """The task's attempts before its last one, oldest first, values opened."""

    def cancel(self, task_id: str, now: Optional[float] = None) -> bool:
        """A queued or scheduled task becomes cancelled: whether it did."""

    def cancelled_among(self, task_ids: Sequence[str]) -> set[str]:
        """Which of these tasks are cancelled."""

    def succeeded_among(self, task_ids: Sequence[str]) -> set[str]:
        """Which of these tasks succeeded."""

    def message_owners(self, message_ids: Sequence[str],
                       not_ids: Sequence[str] = ()) -> dict[str, str]:
        """The task each SQS message id was recorded for (the first one
        published), leaving out the tasks ``not_ids``."""

    def mark_purged(self, queue: str, before: float, now: Optional[float] = None) -> int:
        """The queue's tasks queued or scheduled, not changed since ``before``,
        become purged; how many."""

    def purge_expired(self, succeeded_ttl: Optional[float], failed_ttl: Optional[float],
                      now: Optional[float] = None, queued_ttl: Optional[float] = None) -> int:
        """Delete the tasks past their TTL (and workers silent for ``failed_ttl``,
        expired unique keys, ended workflows); how many tasks."""

    def roll_up(self) -> bool:
        """Fold the counters' changes (:mod:`kale.store.counts`) into them; False
        when another process is doing it."""

    def claim_retry(self, task_id: str, marker: str) -> bool:
        """Set the record's ``retried_as`` to ``marker`` if it has none:
        whether this call did (one caller wins)."""

    def replace_retry(self, task_id: str, marker: str, value: Optional[str]) -> None:
        """Set ``retried_as`` to ``value`` if it is still ``marker``."""

    def retried_as(self, task_id: str) -> Optional[str]:
        """The record's ``retried_as`` (None when it has none, or no record)."""


class RecordQueries(Protocol):
    """Questions about many records (``store.queries``)."""

    def page(self, where: TaskFilter, limit: int = 50,
             cursor: Optional[str] = None) -> tuple[list[TaskRecord], Optional[str]]:
        """Up to ``limit`` records, newest first (by publish time, then id),
        after ``cursor``; and the next page's cursor (None on the last)."""

    def iterate(self, where: TaskFilter, page_size: int = 500) -> Iterator[TaskRecord]:
        """Every matching record, newest first."""

    def count(self, where: TaskFilter) -> int:
        """How many records match."""

    def summary(self, where: TaskFilter) -> dict[str, Any]:
        """Counts by status, by task and status, by queue and status."""

    def counts_by_status(self) -> dict[str, int]:
        """Every record counted by status (each status present)."""

    def oldest_queued(self, now: Optional[float] = None) -> dict[str, float]:
        """When the oldest task waiting in each queue became due, by queue."""

    def scheduled_after(self, after: float) -> dict[str, tuple[int, float]]:
        """By queue: how many scheduled tasks are due later than ``after``, and the
        earliest of those due times (queues with none left out)."""

    def delete(self, where: TaskFilter) -> int:
        """Delete the matching records; how many."""

    def timeline(self, window_sec: float = 3600, bucket_sec: int = 60,
                 now: Optional[float] = None) -> dict[str, Any]:
        """Tasks finished per bucket and their mean duration, per task; and
        per queue over the last minute."""

    def activity(self, by: str, window_sec: float = 3600, bucket_sec: int = 60,
                 now: Optional[float] = None) -> dict[str, Any]:
        """Per ``by`` (``queue`` or ``task``): runs that ended per bucket over the
        last ``window_sec`` by outcome (a status, or ``retried``), with their mean
        duration; see :func:`activity_answer`."""

    def workers(self, state: Optional[str] = None,
                now: Optional[float] = None) -> list[WorkerRecord]:
        """Worker and supervisor rows, running first, newest first."""

    def ids_with_prefix(self, prefix: str, limit: int) -> list[str]:
        """Up to ``limit`` task ids that start with ``prefix``, in order."""
