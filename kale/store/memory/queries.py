"""Questions about many records, in memory (see :class:`kale.store.records.RecordQueries`)."""
from __future__ import annotations

import collections
import math
import time
from typing import TYPE_CHECKING, Any, Optional

from kale.statuses import TaskStatus
from kale.store.counts import (
    MINUTE,
    MinuteRow,
    count_of,
    counted,
    first_whole_minute,
    matches_counted,
    summary_of,
    timeline_of,
)
from kale.store.record import MAX_LIMIT, TaskFilter, TaskRecord, WorkerRecord, decode_cursor
from kale.store.records import (
    RAN,
    DerivedQueries,
    Page,
    Row,
    Series,
    activity_answer,
    add_runs,
    check_activity_by,
    check_worker_state,
    page_of,
    timeline_answer,
    workers_in_order,
)

if TYPE_CHECKING:
    from kale.store.memory.records import MemoryRecords


def matches(where: TaskFilter, row: Row) -> bool:
    """Whether a task's row passes the filter."""
    labels = row['labels'] or {}
    return matches_counted(where, row['task'], row['queue'], row['status']) \
        and all(labels.get(key) == value for key, value in where.labels) \
        and (where.since is None or row['published_at'] >= where.since) \
        and (where.until is None or row['published_at'] < where.until)


def _run_row(row: Row, unit: int) -> MinuteRow:
    """A run as a counted row of one run, numbered in ``unit`` seconds."""
    return (int(row['finished_at'] // unit), row['task'], str(row['status']), 1,
            float(row['duration_sec'] or 0.0), int(row['duration_sec'] is not None))


class MemoryQueries(DerivedQueries):
    """The questions of :class:`kale.store.sql.queries.Queries`, on rows in memory."""

    def __init__(self, records: 'MemoryRecords'):
        self.records = records

    def _rows(self, where: TaskFilter) -> list[Row]:
        with self.records.root.lock:
            return [dict(row) for row in self.records.tasks.values() if matches(where, row)]

    def _ended(self, since: float) -> list[Row]:
        """The runs that ended at ``since`` or later."""
        return [row for row in self._rows(TaskFilter(statuses=RAN))
                if row['finished_at'] is not None and row['finished_at'] >= since]

    def page(self, where: TaskFilter, limit: int = 50, cursor: Optional[str] = None) -> Page:
        rows = sorted(self._rows(where), key=lambda row: (row['published_at'], row['id']),
                      reverse=True)
        if cursor:
            after = decode_cursor(cursor)
            rows = [row for row in rows if (row['published_at'], row['id']) < after]
        return page_of([TaskRecord.from_row(row, self.records.sealer)
                        for row in rows[:limit + 1]], limit)

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
        whole = not bucket_sec % MINUTE     # else buckets that are not whole minutes: every run
        unit, until = (MINUTE, first_whole_minute(since) * MINUTE) if whole else (bucket_sec, math.inf)
        with self.records.root.lock:
            minutes = self.records.counts.minute_rows(first_whole_minute(since)) if whole else []
            ended = self._ended(min(since, now - 60))
        edge = [_run_row(row, unit) for row in ended if since <= row['finished_at'] < until]
        last_minute = collections.Counter(row['queue'] for row in ended
                                          if row['finished_at'] >= now - 60)
        return timeline_answer(window_sec, bucket_sec, timeline_of(minutes, edge, bucket_sec, unit=unit),
                               dict(last_minute))

    def activity(self, by: str, window_sec: float = 3600, bucket_sec: int = 60,
                 now: Optional[float] = None) -> dict[str, Any]:
        check_activity_by(by)
        since = (time.time() if now is None else now) - window_sec
        series: Series = {}
        for row in self._ended(since):
            add_runs(series, row[by], row['finished_at'] // bucket_sec, str(row['status']), 1,
                     row['duration_sec'])
        with self.records.root.lock:
            tasks = self.records.tasks
            retried = [(tasks[task_id][by], dict(row)) for (task_id, _), row
                       in self.records.attempt_rows.items() if task_id in tasks]
        for name, row in retried:
            if row['finished_at'] is not None and row['finished_at'] >= since:
                add_runs(series, name, row['finished_at'] // bucket_sec, 'retried', 1,
                         row['duration_sec'])
        return activity_answer(by, window_sec, bucket_sec, series)

    def workers(self, state: Optional[str] = None,
                now: Optional[float] = None) -> list[WorkerRecord]:
        check_worker_state(state)
        now = time.time() if now is None else now
        with self.records.root.lock:
            rows = sorted((dict(row) for row in self.records.workers.values()),
                          key=lambda row: -row['started_at'])[:MAX_LIMIT]
        found = [WorkerRecord.from_row(row, now) for row in rows]
        return workers_in_order([worker for worker in found
                                 if state is None or worker.state == state])

    def ids_with_prefix(self, prefix: str, limit: int) -> list[str]:
        with self.records.root.lock:
            return sorted(task_id for task_id in self.records.tasks
                          if task_id.startswith(prefix))[:limit]
