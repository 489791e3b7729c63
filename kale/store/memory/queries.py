"""Questions about many records, in memory (see :class:`kale.store.records.RecordQueries`)."""
from __future__ import annotations

import collections
import math
import time
from typing import TYPE_CHECKING, Any, Iterator, Optional

from kale.exceptions import BadFilterError
from kale.statuses import PENDING_FILTER, TaskStatus, WorkerState, status_values
from kale.store.counts import (
    MINUTE,
    count_of,
    counted,
    first_whole_minute,
    summary_of,
    timeline_of,
)
from kale.store.record import TaskFilter, TaskRecord, WorkerRecord, decode_cursor, encode_cursor
from kale.store.records import (
    ACTIVITY_BY,
    RAN,
    Row,
    activity_answer,
    activity_point,
    every_page,
    timeline_point,
)

if TYPE_CHECKING:
    from kale.store.memory.records import MemoryRecords

MAX_WORKERS = 1000


def matches(where: TaskFilter, row: Row) -> bool:
    """Whether a task's row passes the filter."""
    return (not where.statuses or row['status'] in where.statuses) and \
        (not where.task or _same_task(where.task, row['task'])) and \
        (not where.queue or row['queue'] == where.queue) and \
        _labelled(where, row) and _published_within(where, row['published_at'])


def _same_task(wanted: str, task: str) -> bool:
    """A dotted path matches itself; a class name alone, in any module."""
    return task == wanted or ('.' not in wanted and task.endswith('.' + wanted))


def _labelled(where: TaskFilter, row: Row) -> bool:
    labels = row['labels'] or {}
    return all(labels.get(key) == value for key, value in where.labels)


def _published_within(where: TaskFilter, published_at: float) -> bool:
    return (where.since is None or published_at >= where.since) and \
        (where.until is None or published_at < where.until)


class MemoryQueries:
    """The questions of :class:`kale.store.sql.queries.Queries`, on rows in memory."""

    def __init__(self, records: 'MemoryRecords'):
        self.records = records

    def _rows(self, where: TaskFilter) -> list[Row]:
        with self.records.root.lock:
            return [dict(row) for row in self.records.tasks.values() if matches(where, row)]

    def page(self, where: TaskFilter, limit: int = 50,
             cursor: Optional[str] = None) -> tuple[list[TaskRecord], Optional[str]]:
        rows = sorted(self._rows(where), key=lambda row: (row['published_at'], row['id']),
                      reverse=True)
        if cursor:
            after = decode_cursor(cursor)
            rows = [row for row in rows if (row['published_at'], row['id']) < after]
        found = [TaskRecord.from_row(row, self.records.sealer) for row in rows[:limit + 1]]
        more = len(found) > limit
        found = found[:limit]
        return found, encode_cursor(found[-1]) if more and found else None

    def iterate(self, where: TaskFilter, page_size: int = 500) -> Iterator[TaskRecord]:
        """Every matching record, newest first, a page at a time."""
        return every_page(self.page, where, page_size)

    def count(self, where: TaskFilter) -> int:
        if counted(where):
            with self.records.root.lock:
                return count_of(self.records.counts.count_rows(), where)
        return len(self._rows(where))

    def summary(self, where: TaskFilter) -> dict[str, Any]:
        if counted(where):
            with self.records.root.lock:
                rows = self.records.counts.count_rows()
        else:
            rows = [(row['task'], row['queue'], str(row['status']), 1)
                    for row in self._rows(where)]
        return summary_of(rows, where)

    def counts_by_status(self) -> dict[str, int]:
        counts = self.summary(TaskFilter())['by_status']
        counts.pop(PENDING_FILTER)
        return counts

    def oldest_queued(self, now: Optional[float] = None) -> dict[str, float]:
        now = time.time() if now is None else now
        oldest: dict[str, float] = {}
        for row in self._rows(TaskFilter(statuses=(TaskStatus.QUEUED,))):
            due = row['next_attempt_at'] if row['next_attempt_at'] is not None \
                else row['published_at']
            if due <= now:
                oldest[row['queue']] = min(float(due), oldest.get(row['queue'], math.inf))
        return oldest

    def scheduled_after(self, after: float) -> dict[str, tuple[int, float]]:
        found: dict[str, tuple[int, float]] = {}
        for row in self._rows(TaskFilter(statuses=(TaskStatus.SCHEDULED,))):
            due = row['next_attempt_at']
            if due is not None and due > after:
                n, earliest = found.get(row['queue'], (0, math.inf))
                found[row['queue']] = (n + 1, min(earliest, float(due)))
        return found

    def delete(self, where: TaskFilter) -> int:
        with self.records.root.lock:
            gone = [task_id for task_id, row in self.records.tasks.items() if matches(where, row)]
            for task_id in gone:
                self.records.counts.add(self.records.tasks.pop(task_id), -1)
            return len(gone)

    def timeline(self, window_sec: float = 3600, bucket_sec: int = 60,
                 now: Optional[float] = None) -> dict[str, Any]:
        now = time.time() if now is None else now
        since = now - window_sec
        first = first_whole_minute(since)
        with self.records.root.lock:
            minutes = self.records.counts.minute_rows(first)
            recent = [dict(row) for row in self.records.tasks.values()
                      if row['status'] in RAN and row['finished_at'] is not None
                      and row['finished_at'] >= min(since, now - 60)]
        edge = [(int(row['finished_at'] // MINUTE), row['task'], str(row['status']), 1,
                 float(row['duration_sec'] or 0.0), int(row['duration_sec'] is not None))
                for row in recent if since <= row['finished_at'] < first * MINUTE]
        if bucket_sec % MINUTE:             # buckets that are not whole minutes: every run
            minutes = []
            edge = [(int(row['finished_at'] // bucket_sec), row['task'], str(row['status']), 1,
                     float(row['duration_sec'] or 0.0), int(row['duration_sec'] is not None))
                    for row in self._rows(TaskFilter(statuses=RAN))
                    if row['finished_at'] is not None and row['finished_at'] >= since]
        series = timeline_of(minutes, edge, bucket_sec,
                             unit=MINUTE if not bucket_sec % MINUTE else bucket_sec)
        last_minute = collections.Counter(row['queue'] for row in recent
                                          if row['finished_at'] >= now - 60)
        return {'bucket_sec': bucket_sec, 'window_sec': window_sec,
                'series': {task: [timeline_point(number * bucket_sec, p)
                                  for number, p in sorted(points.items())]
                           for task, points in sorted(series.items())},
                'queues_last_minute': dict(last_minute)}

    def activity(self, by: str, window_sec: float = 3600, bucket_sec: int = 60,
                 now: Optional[float] = None) -> dict[str, Any]:
        if by not in ACTIVITY_BY:
            raise BadFilterError('by must be one of %s, got %r' % (', '.join(ACTIVITY_BY), by))
        since = (time.time() if now is None else now) - window_sec
        series: dict[str, dict[int, dict[str, Any]]] = {}
        for row in self._rows(TaskFilter(statuses=RAN)):
            if row['finished_at'] is not None and row['finished_at'] >= since:
                found = series.setdefault(row[by], {}).setdefault(
                    int(row['finished_at'] // bucket_sec), activity_point())
                found[str(row['status'])] += 1
                if row['duration_sec'] is not None and row['status'] != TaskStatus.CANCELLED:
                    found['duration_sum'] += float(row['duration_sec'])
                    found['timed'] += 1
        with self.records.root.lock:
            retried = [(dict(self.records.tasks[task_id]), dict(row)) for (task_id, _), row
                       in self.records.attempt_rows.items() if task_id in self.records.tasks]
        for task, row in retried:
            if row['finished_at'] is not None and row['finished_at'] >= since:
                found = series.setdefault(task[by], {}).setdefault(
                    int(row['finished_at'] // bucket_sec), activity_point())
                found['retried'] += 1
                if row['duration_sec'] is not None:
                    found['duration_sum'] += float(row['duration_sec'])
                    found['timed'] += 1
        return activity_answer(by, window_sec, bucket_sec, series)

    def workers(self, state: Optional[str] = None,
                now: Optional[float] = None) -> list[WorkerRecord]:
        if state is not None and state not in status_values(WorkerState):
            raise BadFilterError('unknown worker state %r: use one of %s'
                                 % (state, ', '.join(status_values(WorkerState))))
        now = time.time() if now is None else now
        with self.records.root.lock:
            rows = sorted((dict(row) for row in self.records.workers.values()),
                          key=lambda row: -row['started_at'])[:MAX_WORKERS]
        found = [WorkerRecord.from_row(row, now) for row in rows]
        if state is not None:
            found = [worker for worker in found if worker.state == state]
        order = {WorkerState.RUNNING: 0, WorkerState.LOST: 1, WorkerState.STOPPED: 2}
        return sorted(found, key=lambda w: (order[WorkerState(w.state)], -w.started_at))

    def ids_with_prefix(self, prefix: str, limit: int) -> list[str]:
        with self.records.root.lock:
            return sorted(task_id for task_id in self.records.tasks
                          if task_id.startswith(prefix))[:limit]

