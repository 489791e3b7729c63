"""Questions about many records, on a database store: keyset pages,
counts, summaries, deletes, throughput over time, workers, ids by prefix
(docs/explanation/internals-store.md, "Questions about many records")."""
from __future__ import annotations

import contextlib
import logging
import time
from typing import Any, Iterator, Optional

from sqlalchemy import Connection, Integer, and_, cast, func, or_, select

from kale.exceptions import RecordsUnavailableError
from kale.statuses import TaskStatus, WorkerState
from kale.store.counts import MINUTE, MinuteRow, count_of, counted, summary_of, timeline_of
from kale.store.record import (
    DEFAULT_LIMIT,
    LOST_AFTER_HEARTBEATS,
    MAX_LIMIT,
    TaskFilter,
    TaskRecord,
    WorkerRecord,
    decode_cursor,
)
from kale.store.records import (
    RAN,
    DerivedQueries,
    Page,
    Series,
    activity_answer,
    add_runs,
    check_activity_by,
    check_worker_state,
    page_of,
    timeline_answer,
    workers_in_order,
)
from kale.store.sql import counters
from kale.store.sql.records import OnStore
from kale.store.sql.schema import attempts, tasks, workers

logger = logging.getLogger(__name__)


def where_of(where: TaskFilter) -> Any:
    """The filter as a SQL condition on kale_tasks."""
    conditions: list[Any] = []
    if where.statuses:
        conditions.append(tasks.c.status.in_(where.statuses))
    if where.task:
        if '.' in where.task:
            conditions.append(tasks.c.task == where.task)
        else:           # a class name alone matches it in any module
            conditions.append(or_(tasks.c.task == where.task,
                                  tasks.c.task.endswith('.' + where.task, autoescape=True)))
    if where.queue:
        conditions.append(tasks.c.queue == where.queue)
    for key, value in where.labels:
        conditions.append(tasks.c.labels[key].as_string() == value)
    if where.since is not None:
        conditions.append(tasks.c.published_at >= where.since)
    if where.until is not None:
        conditions.append(tasks.c.published_at < where.until)
    return and_(True, *conditions)


class Queries(DerivedQueries, OnStore):
    """Questions about many records, on one store."""

    _fold_refused = False          # said once: a reader that may not write

    @contextlib.contextmanager
    def _counted(self) -> Iterator[Connection]:
        """A read transaction on the counters, after folding their changes first
        when more than READ_FOLD_CHANGES wait (under the writers' folds' lock)."""
        with self.store.begin() as conn:
            if not counters.behind(conn):
                yield conn
                return
        try:
            self.store.roll_up()
        except RecordsUnavailableError as exc:      # the read adds them all, as before
            if not self._fold_refused:
                self._fold_refused = True
                logger.warning('records: a reader could not fold the counters\' changes '
                               '(reads stay slow until a writer does): %s', exc)
        with self.store.begin() as conn:
            yield conn

    def page(self, where: TaskFilter, limit: int = DEFAULT_LIMIT,
             cursor: Optional[str] = None) -> Page:
        query = select(tasks).where(where_of(where))
        if cursor:
            published_at, task_id = decode_cursor(cursor)
            query = query.where(or_(tasks.c.published_at < published_at,
                                    and_(tasks.c.published_at == published_at,
                                         tasks.c.id < task_id)))
        query = query.order_by(tasks.c.published_at.desc(), tasks.c.id.desc()).limit(limit + 1)
        with self.store.begin() as conn:
            return page_of([TaskRecord.from_row(row, self.store.sealer)
                            for row in conn.execute(query).mappings()], limit)

    def count(self, where: TaskFilter) -> int:
        """From the counters unless the filter has labels or times."""
        if counted(where):
            with self._counted() as conn:
                return count_of(counters.count_rows(conn), where)
        return int(self.store.read(select(func.count()).select_from(tasks)
                                   .where(where_of(where)))[0][0] or 0)

    def summary(self, where: TaskFilter) -> dict[str, Any]:
        """From the counters (:mod:`kale.store.counts`) unless the filter has labels or times."""
        if counted(where):
            with self._counted() as conn:
                return summary_of(counters.count_rows(conn), where)
        query = select(tasks.c.task, tasks.c.queue, tasks.c.status, func.count()) \
            .where(where_of(where)).group_by(tasks.c.task, tasks.c.queue, tasks.c.status)
        return summary_of(self.store.read(query), where)

    def oldest_queued(self, now: Optional[float] = None) -> dict[str, float]:
        """A task's due time is its publish, or the end of its delay."""
        now = time.time() if now is None else now
        due = func.coalesce(tasks.c.next_attempt_at, tasks.c.published_at)
        query = select(tasks.c.queue, func.min(due)) \
            .where(tasks.c.status == TaskStatus.QUEUED, due <= now).group_by(tasks.c.queue)
        return {queue: float(oldest) for queue, oldest in self.store.read(query)}

    def scheduled_after(self, after: float) -> dict[str, tuple[int, float]]:
        query = select(tasks.c.queue, func.count(), func.min(tasks.c.next_attempt_at)) \
            .where(tasks.c.status == TaskStatus.SCHEDULED, tasks.c.next_attempt_at > after) \
            .group_by(tasks.c.queue)
        return {queue: (int(n), float(earliest)) for queue, n, earliest in self.store.read(query)}

    def delete(self, where: TaskFilter) -> int:
        """In chunks (:meth:`kale.store.sql.records.RecordStore.delete_in_chunks`)."""
        return self.store.delete_in_chunks(where_of(where))

    def _bucket(self, column: Any, bucket_sec: int) -> Any:
        if self.store.dialect == 'postgresql':
            return func.floor(column / bucket_sec)
        return cast(column / bucket_sec, Integer)

    def timeline(self, window_sec: float = 3600, bucket_sec: int = 60,
                 now: Optional[float] = None) -> dict[str, Any]:
        """Buckets of whole minutes are read from the counters."""
        now = time.time() if now is None else now
        since = now - window_sec
        with self._counted() as conn:
            runs = counters.run_rows(conn, since, bucket_sec) if bucket_sec % MINUTE == 0 \
                else self._scanned_runs(conn, since, bucket_sec)
            last_minute = counters.finished_by_queue(conn, now - 60)
        return timeline_answer(window_sec, bucket_sec,
                               timeline_of([], runs, bucket_sec, unit=bucket_sec), last_minute)

    def _scanned_runs(self, conn: Any, since: float, bucket_sec: int) -> list[MinuteRow]:
        """The runs finished since ``since`` read from the records (buckets that
        are not whole minutes), shaped as the counters' minutes but numbered in buckets."""
        bucket = self._bucket(tasks.c.finished_at, bucket_sec)
        query = select(bucket, tasks.c.task, tasks.c.status, func.count(),
                       func.coalesce(func.sum(tasks.c.duration_sec), 0.0),
                       func.count(tasks.c.duration_sec)) \
            .where(tasks.c.finished_at >= since, tasks.c.status.in_(RAN)) \
            .group_by(bucket, tasks.c.task, tasks.c.status)
        return [(int(number), task, status, int(n), float(total), int(timed))
                for number, task, status, n, total, timed in conn.execute(query)]

    def activity(self, by: str, window_sec: float = 3600, bucket_sec: int = 60,
                 now: Optional[float] = None) -> dict[str, Any]:
        """From ``kale_tasks`` (each task's last run) and ``kale_attempts``
        (the runs before it that failed and were retried)."""
        check_activity_by(by)
        since = (time.time() if now is None else now) - window_sec
        key = tasks.c[by]
        ended = self._bucket(tasks.c.finished_at, bucket_sec).label('bucket')
        # SQLite groups by an expression, else it reads every record (see
        # internals-store.md, "Questions about many records").
        grouped = key.concat('') if self.store.dialect == 'sqlite' else key
        runs = select(grouped, ended, tasks.c.status, func.count(), func.avg(tasks.c.duration_sec)) \
            .where(tasks.c.finished_at >= since).group_by(grouped, ended, tasks.c.status)
        retried_at = self._bucket(attempts.c.finished_at, bucket_sec).label('bucket')
        retries = select(key, retried_at, func.count(), func.avg(attempts.c.duration_sec)) \
            .select_from(attempts.join(tasks, tasks.c.id == attempts.c.task_id)) \
            .where(attempts.c.finished_at >= since).group_by(key, retried_at)
        series: Series = {}
        with self.store.begin() as conn:
            for name, number, status, n, mean in conn.execute(runs):
                if status in RAN:
                    add_runs(series, name, number, status, n, mean)
            for name, number, n, mean in conn.execute(retries):
                add_runs(series, name, number, 'retried', n, mean)
        return activity_answer(by, window_sec, bucket_sec, series)

    def ids_with_prefix(self, prefix: str, limit: int) -> list[str]:
        escaped = prefix.replace('\\', '\\\\').replace('%', '\\%').replace('_', '\\_')
        return [str(row[0]) for row in self.store.read(select(tasks.c.id).where(
            tasks.c.id.like(escaped + '%', escape='\\')).order_by(tasks.c.id).limit(limit))]

    def workers(self, state: Optional[str] = None,
                now: Optional[float] = None) -> list[WorkerRecord]:
        check_worker_state(state)
        now = time.time() if now is None else now
        query = select(workers).order_by(workers.c.started_at.desc()).limit(MAX_LIMIT)
        if state == WorkerState.STOPPED:
            query = query.where(workers.c.stopped_at.is_not(None))
        elif state is not None:
            lost = workers.c.heartbeat_at < now - LOST_AFTER_HEARTBEATS * workers.c.heartbeat_sec
            query = query.where(workers.c.stopped_at.is_(None),
                                lost if state == WorkerState.LOST else ~lost)
        return workers_in_order([WorkerRecord.from_row(row._mapping, now)
                                 for row in self.store.read(query)])
