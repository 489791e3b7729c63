"""The task records' counters on a database (see :mod:`kale.store.counts`):
triggers on ``kale_tasks`` append changes to ``kale_task_changes``, which
:func:`roll_up` folds into the counters and reads add while not folded
(docs/explanation/internals-store.md, "The records' counters")."""
from __future__ import annotations

from typing import Optional

from sqlalchemy import Connection, text

from kale.store.counts import MINUTE, RAN, CountRow, MinuteRow, first_whole_minute
from kale.store.sql.counters_schema import (
    FOLD_COUNTS,
    FOLD_MINUTES,
    FOLD_PERIODS,
    PER_PERIOD,
    PERIOD_SEC,
    add_triggers,
    drop_triggers,
    install,
    recount,
)

#: The PostgreSQL advisory lock of the one folding the changes ('kalc').
ROLL_UP_LOCK = 0x6B616C63
#: Changes not folded yet beyond which a reader of the counters folds them
#: before it reads (docs/explanation/internals-store.md says why this many).
READ_FOLD_CHANGES = 10_000


def behind(conn: Connection) -> bool:
    """Whether more than READ_FOLD_CHANGES changes wait to be folded (read
    no further than that: the question costs that many rows at most)."""
    found = conn.exec_driver_sql(
        'SELECT count(*) FROM (SELECT 1 FROM kale_task_changes LIMIT %d) AS c'
        % (READ_FOLD_CHANGES + 1)).scalar()
    return int(found or 0) > READ_FOLD_CHANGES


def roll_up(conn: Connection, tidy: bool = False) -> bool:
    """Fold the changes into the counters in the caller's transaction; False when
    another process is folding them. ``tidy``: drop the counters down to 0."""
    if conn.dialect.name != 'postgresql':       # writes are one at a time: nothing comes between
        # The changes summed once by key (a few hundred rows), then folded three ways.
        conn.exec_driver_sql('CREATE TEMP TABLE IF NOT EXISTS kale_task_summed (task, queue, '
                             'status, minute, n, duration_sum, timed)')
        conn.exec_driver_sql('INSERT INTO temp.kale_task_summed SELECT task, queue, status, '
                             'minute, sum(n), sum(duration_sum), sum(timed) FROM '
                             'kale_task_changes GROUP BY task, queue, status, minute')
        for fold in (FOLD_COUNTS, FOLD_MINUTES, FOLD_PERIODS):
            conn.exec_driver_sql(fold.format(source='temp.kale_task_summed', order=''))
        conn.exec_driver_sql('DELETE FROM temp.kale_task_summed')
        conn.exec_driver_sql('DELETE FROM kale_task_changes')
    else:
        if not conn.exec_driver_sql('SELECT pg_try_advisory_xact_lock(%d)'
                                    % ROLL_UP_LOCK).scalar():
            return False
        # One statement: the rows it deletes are the rows it folds, whatever
        # commits meanwhile; its keys in order, so that no other writer of a
        # counter row waits in a cycle with it.
        conn.exec_driver_sql(
            'WITH moved AS (DELETE FROM kale_task_changes RETURNING *), '
            'counted AS (%s), timed AS (%s) %s' % (
                FOLD_COUNTS.format(source='moved', order='ORDER BY task, queue, status'),
                FOLD_MINUTES.format(source='moved', order='ORDER BY minute, task, status'),
                FOLD_PERIODS.format(source='moved', order='ORDER BY 1, task, status')))
    for table in ('kale_task_counts', 'kale_task_minutes', 'kale_task_periods'):
        if tidy:
            conn.exec_driver_sql('DELETE FROM %s WHERE n = 0' % table)
    return True


def count_rows(conn: Connection) -> list[CountRow]:
    """(task, queue, status, n) of every record, the changes not folded included."""
    found = conn.execute(text(
        'SELECT task, queue, status, sum(n) FROM (SELECT task, queue, status, n FROM '
        'kale_task_counts UNION ALL SELECT task, queue, status, n FROM kale_task_changes) AS c '
        'GROUP BY task, queue, status'))
    return [(task, queue, status, int(n)) for task, queue, status, n in found if n]


def run_rows(conn: Connection, since: float, bucket_sec: int) -> list[MinuteRow]:
    """The runs finished since ``since`` by bucket number (of ``bucket_sec``, a
    multiple of a minute), task and status: from the periods, the minutes and,
    for the partial minute at the start, the records; changes not folded included."""
    first_minute = first_whole_minute(since)
    rows = _edge_rows(conn, since, first_minute, bucket_sec)
    if bucket_sec % PERIOD_SEC:
        return rows + _grouped(conn, 'minute', first_minute, None, bucket_sec)
    first_period = -(-first_minute // PER_PERIOD)
    return rows + _grouped(conn, 'minute', first_minute, first_period * PER_PERIOD, bucket_sec) \
        + _grouped(conn, 'period', first_period, None, bucket_sec)


def _grouped(conn: Connection, unit: str, low: int, high: Optional[int],
             bucket_sec: int) -> list[MinuteRow]:
    """Runs by bucket, task and status from the minutes or the periods
    numbered ``low`` up to ``high`` (excluded; None: no end)."""
    if high is not None and high <= low:
        return []
    seconds = MINUTE if unit == 'minute' else PERIOD_SEC
    of_change = 'minute' if unit == 'minute' else 'minute / %d' % PER_PERIOD
    until = '' if high is None else ' AND {col} < :high'
    found = conn.execute(text((
        'SELECT ({col} * %d) / :bucket AS bucket, task, status, sum(n), sum(duration_sum), '
        'sum(timed) FROM (SELECT {col}, task, status, n, duration_sum, timed FROM {table} '
        'WHERE {col} >= :low%s UNION ALL SELECT %s AS {col}, task, status, n, duration_sum, timed '
        'FROM kale_task_changes WHERE minute IS NOT NULL AND %s >= :low%s) AS m '
        'GROUP BY ({col} * %d) / :bucket, task, status' % (
            seconds, until, of_change, of_change, until.replace('{col}', of_change), seconds))
        .format(col=unit, table='kale_task_%ss' % unit)),
        {'low': low, 'high': high, 'bucket': bucket_sec})
    return [(int(number), task, status, int(n), float(total), int(timed))
            for number, task, status, n, total, timed in found if n]


def _by_finish_time(conn: Connection) -> str:
    """The records read by their finish time: SQLite, not told, may take the
    index of a column it groups by, or of the status, and read them all."""
    return 'kale_tasks INDEXED BY kale_tasks_finished' if conn.dialect.name == 'sqlite' \
        else 'kale_tasks'


def finished_by_queue(conn: Connection, since: float) -> dict[str, int]:
    """Runs finished since ``since``, by queue (read from the records)."""
    found: dict[str, int] = {}
    for queue, status, n in conn.execute(text(
            'SELECT queue, status, count(*) FROM %s WHERE finished_at >= :since '
            'GROUP BY queue, status' % _by_finish_time(conn)), {'since': since}):
        if status in RAN:
            found[queue] = found.get(queue, 0) + int(n)
    return found


def _edge_rows(conn: Connection, since: float, first_minute: int,
               bucket_sec: int) -> list[MinuteRow]:
    """The runs finished from ``since`` to the next whole minute, by bucket, from the records."""
    if first_minute * MINUTE <= since:
        return []
    found = conn.execute(text(
        'SELECT task, status, count(*), coalesce(sum(duration_sec), 0), count(duration_sec) '
        'FROM %s WHERE finished_at >= :since AND finished_at < :until '
        'GROUP BY task, status' % _by_finish_time(conn)),
        {'since': since, 'until': float(first_minute * MINUTE)})
    number = ((first_minute - 1) * MINUTE) // bucket_sec
    return [(number, task, status, int(n), float(total), int(timed))
            for task, status, n, total, timed in found if status in RAN]


__all__ = ['add_triggers', 'behind', 'count_rows', 'drop_triggers', 'finished_by_queue',
           'install', 'recount', 'roll_up', 'run_rows']
