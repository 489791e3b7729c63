"""The records' activity on a database (see
:meth:`kale.store.records.RecordQueries.activity`): runs that ended per
bucket, by queue or by task, from ``kale_tasks`` (each task's last run) and
``kale_attempts`` (the runs before it that failed and were retried)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import Integer, cast, func, select

from kale.exceptions import BadFilterError
from kale.statuses import TaskStatus
from kale.store.records import ACTIVITY_BY, RAN, activity_answer, activity_point
from kale.store.sql.schema import attempts, tasks

if TYPE_CHECKING:
    from kale.store.sql.records import RecordStore


def _bucket(dialect: str, column: Any, bucket_sec: int) -> Any:
    if dialect == 'postgresql':
        return func.floor(column / bucket_sec)
    return cast(column / bucket_sec, Integer)


def activity(store: 'RecordStore', by: str, window_sec: float, bucket_sec: int,
             now: float) -> dict[str, Any]:
    if by not in ACTIVITY_BY:
        raise BadFilterError('by must be one of %s, got %r' % (', '.join(ACTIVITY_BY), by))
    since = now - window_sec
    key = tasks.c[by]
    ended = _bucket(store.dialect, tasks.c.finished_at, bucket_sec).label('bucket')
    # Only the end time filters (the statuses are kept below), and SQLite
    # groups by an expression: left to choose, it read the runs through the
    # index of the grouped column or of the status, that is every record
    # (280 ms at a million records; bench records-volume).
    grouped = key.concat('') if store.dialect == 'sqlite' else key
    runs = select(grouped, ended, tasks.c.status, func.count(), func.avg(tasks.c.duration_sec)) \
        .where(tasks.c.finished_at >= since).group_by(grouped, ended, tasks.c.status)
    retried_at = _bucket(store.dialect, attempts.c.finished_at, bucket_sec).label('bucket')
    retries = select(key, retried_at, func.count(), func.avg(attempts.c.duration_sec)) \
        .select_from(attempts.join(tasks, tasks.c.id == attempts.c.task_id)) \
        .where(attempts.c.finished_at >= since).group_by(key, retried_at)
    series: dict[str, dict[int, dict[str, Any]]] = {}

    def point(name: str, number: Any) -> dict[str, Any]:
        return series.setdefault(name, {}).setdefault(int(number), activity_point())

    with store.begin() as conn:
        for name, number, status, n, mean in conn.execute(runs):
            if status not in RAN:
                continue
            found = point(name, number)
            found[status] += n
            if mean is not None and status != TaskStatus.CANCELLED:
                found['duration_sum'] += float(mean) * n
                found['timed'] += n
        for name, number, n, mean in conn.execute(retries):
            found = point(name, number)
            found['retried'] += n
            if mean is not None:
                found['duration_sum'] += float(mean) * n
                found['timed'] += n
    return activity_answer(by, window_sec, bucket_sec, series)
