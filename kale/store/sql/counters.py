"""The task records' counters on a database (see :mod:`kale.store.counts`):
kept by triggers on ``kale_tasks``, in the transaction that writes the
records, whichever statement writes them (a writer's upserts, a cancel, a
queue's purge, ``kale tasks purge``, the TTL purge).

A trigger appends what a row's change does to the counters to
``kale_task_changes`` (minus the old row's keys, plus the new one's): an
append takes no lock that another writer waits for, so two workers' writes
never wait on, or deadlock over, a counter row. The writers' threads fold
the changes into ``kale_task_counts`` and ``kale_task_minutes`` every few
seconds (:func:`roll_up`, one folder at a time); a read adds the changes not
folded yet, so it is exact at any time. Schema version 13 brings the tables
and triggers, and counts the records already there (:func:`install`).
"""
from __future__ import annotations

from typing import Optional

from sqlalchemy import Column, Connection, Float, Integer, String, Table, text

from kale.store.counts import MINUTE, RAN, CountRow, MinuteRow, first_whole_minute
from kale.store.sql.schema import metadata

#: Seconds in a period of kale_task_periods.
PERIOD_SEC = 24 * MINUTE
PER_PERIOD = PERIOD_SEC // MINUTE

task_counts = Table(
    'kale_task_counts', metadata,
    Column('task', String(255), primary_key=True),
    Column('queue', String(128), primary_key=True),
    Column('status', String(16), primary_key=True),
    Column('n', Integer, nullable=False),
)
task_minutes = Table(
    'kale_task_minutes', metadata,
    Column('minute', Integer, primary_key=True),        # floor(finished_at / 60)
    Column('task', String(255), primary_key=True),
    Column('status', String(16), primary_key=True),
    Column('n', Integer, nullable=False),
    Column('duration_sum', Float, nullable=False),
    Column('timed', Integer, nullable=False),           # runs with a duration
)
#: The same as kale_task_minutes by periods of PERIOD_SEC (24 minutes): the
#: timeline's buckets over a day (24 minutes) and a week (168) are whole periods.
task_periods = Table(
    'kale_task_periods', metadata,
    Column('period', Integer, primary_key=True),        # floor(finished_at / PERIOD_SEC)
    Column('task', String(255), primary_key=True),
    Column('status', String(16), primary_key=True),
    Column('n', Integer, nullable=False),
    Column('duration_sum', Float, nullable=False),
    Column('timed', Integer, nullable=False),
)
#: Changes not folded into the tables yet; ``minute`` is null for a row
#: that is not a finished run.
task_changes = Table(
    'kale_task_changes', metadata,
    Column('task', String(255), nullable=False),
    Column('queue', String(128), nullable=False),
    Column('status', String(16), nullable=False),
    Column('minute', Integer),
    Column('n', Integer, nullable=False),
    Column('duration_sum', Float, nullable=False),
    Column('timed', Integer, nullable=False),
)

_RAN_SQL = ', '.join("'%s'" % status.value for status in RAN)
_COUNTED = 'status, task, queue, finished_at, duration_sec'


def _values(row: str, sign: str, minute: str) -> str:
    """A change row's values for ``row`` (NEW or OLD)."""
    return ("({row}.task, {row}.queue, {row}.status, CASE WHEN {row}.finished_at IS NOT NULL "
            "AND {row}.status IN ({ran}) THEN {minute} END, {sign}1, "
            "{sign}coalesce({row}.duration_sec, 0), {sign}(CASE WHEN {row}.duration_sec IS NULL "
            "THEN 0 ELSE 1 END))").format(row=row, sign=sign, ran=_RAN_SQL,
                                          minute=minute.format(row=row))


_SQLITE_MINUTE = 'CAST({row}.finished_at / %d AS INTEGER)' % MINUTE
_PG_MINUTE = 'floor({row}.finished_at / %d)' % MINUTE
_INSERT = 'INSERT INTO kale_task_changes VALUES '


def _sqlite_triggers() -> list[str]:
    changed = ' OR '.join('OLD.%s IS NOT NEW.%s' % (c, c) for c in _COUNTED.split(', '))
    return [
        'CREATE TRIGGER IF NOT EXISTS kale_task_counted_insert AFTER INSERT ON kale_tasks '
        'BEGIN %s%s; END' % (_INSERT, _values('NEW', '', _SQLITE_MINUTE)),
        'CREATE TRIGGER IF NOT EXISTS kale_task_counted_update AFTER UPDATE OF %s ON kale_tasks '
        'WHEN %s BEGIN %s%s, %s; END' % (_COUNTED, changed, _INSERT,
                                         _values('OLD', '-', _SQLITE_MINUTE),
                                         _values('NEW', '', _SQLITE_MINUTE)),
        'CREATE TRIGGER IF NOT EXISTS kale_task_counted_delete AFTER DELETE ON kale_tasks '
        'BEGIN %s%s; END' % (_INSERT, _values('OLD', '-', _SQLITE_MINUTE)),
    ]


def _pg_changes(source: str, sign: str) -> str:
    """The changes of a statement's rows ``source`` (a transition table),
    summed by key: a statement of 500 rows appends a few rows."""
    minute = _PG_MINUTE.format(row='r')
    return ('SELECT r.task, r.queue, r.status, CASE WHEN r.finished_at IS NOT NULL AND r.status '
            'IN ({ran}) THEN {minute} END AS minute, {sign}1 AS n, {sign}coalesce(r.duration_sec, '
            '0) AS duration_sum, {sign}(CASE WHEN r.duration_sec IS NULL THEN 0 ELSE 1 END) AS '
            'timed FROM {source} AS r').format(ran=_RAN_SQL, minute=minute, sign=sign,
                                               source=source)


def _postgres_triggers() -> list[str]:
    """Statement-level triggers: one run for each statement, whatever rows it
    writes, reading the rows it changed from its transition tables."""
    fold = ('INSERT INTO kale_task_changes SELECT task, queue, status, minute, sum(n), '
            'sum(duration_sum), sum(timed) FROM (%s) AS c GROUP BY task, queue, status, minute '
            'HAVING sum(n) <> 0 OR sum(duration_sum) <> 0 OR sum(timed) <> 0;')
    function = (
        'CREATE OR REPLACE FUNCTION kale_task_counted() RETURNS trigger LANGUAGE plpgsql AS $$ '
        "BEGIN IF TG_OP = 'UPDATE' THEN %s ELSIF TG_OP = 'DELETE' THEN %s ELSE %s END IF; "
        'RETURN NULL; END $$' % (
            fold % ('%s UNION ALL %s' % (_pg_changes('old_rows', '-'), _pg_changes('new_rows', ''))),
            fold % _pg_changes('old_rows', '-'), fold % _pg_changes('new_rows', '')))
    return [
        function,
        'CREATE TRIGGER kale_task_counted_insert AFTER INSERT ON kale_tasks REFERENCING NEW '
        'TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION kale_task_counted()',
        'CREATE TRIGGER kale_task_counted_update AFTER UPDATE ON kale_tasks REFERENCING OLD '
        'TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION '
        'kale_task_counted()',
        'CREATE TRIGGER kale_task_counted_delete AFTER DELETE ON kale_tasks REFERENCING OLD '
        'TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION kale_task_counted()',
    ]


TRIGGERS = ('kale_task_counted_insert', 'kale_task_counted_update', 'kale_task_counted_delete')


def install(conn: Connection) -> None:
    """Create the tables and the triggers, and count the records there."""
    for table in (task_counts, task_minutes, task_periods, task_changes):
        table.create(conn, checkfirst=True)
    add_triggers(conn)
    recount(conn)


def add_triggers(conn: Connection) -> None:
    postgres = conn.dialect.name == 'postgresql'
    if postgres:                                # a store migrated again
        drop_triggers(conn)
    for statement in _postgres_triggers() if postgres else _sqlite_triggers():
        conn.exec_driver_sql(statement)


def drop_triggers(conn: Connection) -> None:
    """The triggers gone: writes as before the counters (the benchmark's
    ``off``); the counters are then wrong until :func:`add_triggers` and
    :func:`recount`."""
    for name in TRIGGERS:
        conn.exec_driver_sql('DROP TRIGGER IF EXISTS %s%s' % (
            name, ' ON kale_tasks' if conn.dialect.name == 'postgresql' else ''))


def recount(conn: Connection) -> None:
    """Count every record again (under the caller's write transaction)."""
    minute = (_PG_MINUTE if conn.dialect.name == 'postgresql' else _SQLITE_MINUTE).format(
        row='kale_tasks')
    for table in ('kale_task_changes', 'kale_task_counts', 'kale_task_minutes',
                  'kale_task_periods'):
        conn.exec_driver_sql('DELETE FROM %s' % table)
    conn.exec_driver_sql('INSERT INTO kale_task_counts (task, queue, status, n) '
                         'SELECT task, queue, status, count(*) FROM kale_tasks '
                         'GROUP BY task, queue, status')
    conn.exec_driver_sql(
        'INSERT INTO kale_task_minutes (minute, task, status, n, duration_sum, timed) '
        'SELECT {m}, task, status, count(*), coalesce(sum(duration_sec), 0), count(duration_sec) '
        'FROM kale_tasks WHERE finished_at IS NOT NULL AND status IN ({ran}) '
        'GROUP BY {m}, task, status'.format(m=minute, ran=_RAN_SQL))
    conn.exec_driver_sql(_FOLD_PERIODS.format(source='kale_task_minutes', order=''))


#: The PostgreSQL advisory lock of the one folding the changes ('kalc').
ROLL_UP_LOCK = 0x6B616C63

_FOLD_COUNTS = (
    'INSERT INTO kale_task_counts (task, queue, status, n) '
    'SELECT task, queue, status, sum(n) FROM {source} GROUP BY task, queue, status '
    '{order} ON CONFLICT (task, queue, status) DO UPDATE SET n = kale_task_counts.n + excluded.n')
_FOLD_MINUTES = (
    'INSERT INTO kale_task_minutes (minute, task, status, n, duration_sum, timed) '
    'SELECT minute, task, status, sum(n), sum(duration_sum), sum(timed) FROM {source} '
    'WHERE minute IS NOT NULL GROUP BY minute, task, status {order} '
    'ON CONFLICT (minute, task, status) DO UPDATE SET n = kale_task_minutes.n + excluded.n, '
    'duration_sum = kale_task_minutes.duration_sum + excluded.duration_sum, '
    'timed = kale_task_minutes.timed + excluded.timed')

_FOLD_PERIODS = (
    'INSERT INTO kale_task_periods (period, task, status, n, duration_sum, timed) '
    'SELECT minute / %d, task, status, sum(n), sum(duration_sum), sum(timed) FROM {source} '
    'WHERE minute IS NOT NULL GROUP BY minute / %d, task, status {order} '
    'ON CONFLICT (period, task, status) DO UPDATE SET n = kale_task_periods.n + excluded.n, '
    'duration_sum = kale_task_periods.duration_sum + excluded.duration_sum, '
    'timed = kale_task_periods.timed + excluded.timed') % (PER_PERIOD, PER_PERIOD)


def roll_up(conn: Connection, tidy: bool = False) -> bool:
    """Fold the changes into the counters (in the caller's write
    transaction); False when another process is folding them (PostgreSQL).
    ``tidy``: also drop the counters that came down to 0 (after a purge)."""
    if conn.dialect.name != 'postgresql':       # writes are one at a time: nothing comes between
        # The changes summed once by key (a few hundred rows), then folded three ways.
        conn.exec_driver_sql('CREATE TEMP TABLE IF NOT EXISTS kale_task_summed (task, queue, '
                             'status, minute, n, duration_sum, timed)')
        conn.exec_driver_sql('INSERT INTO temp.kale_task_summed SELECT task, queue, status, '
                             'minute, sum(n), sum(duration_sum), sum(timed) FROM '
                             'kale_task_changes GROUP BY task, queue, status, minute')
        for fold in (_FOLD_COUNTS, _FOLD_MINUTES, _FOLD_PERIODS):
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
                _FOLD_COUNTS.format(source='moved', order='ORDER BY task, queue, status'),
                _FOLD_MINUTES.format(source='moved', order='ORDER BY minute, task, status'),
                _FOLD_PERIODS.format(source='moved', order='ORDER BY 1, task, status')))
    if tidy:
        conn.exec_driver_sql('DELETE FROM kale_task_counts WHERE n = 0')
        conn.exec_driver_sql('DELETE FROM kale_task_minutes WHERE n = 0')
        conn.exec_driver_sql('DELETE FROM kale_task_periods WHERE n = 0')
    return True


def count_rows(conn: Connection) -> list[CountRow]:
    """(task, queue, status, n) of every record, the changes not folded included."""
    found = conn.execute(text(
        'SELECT task, queue, status, sum(n) FROM (SELECT task, queue, status, n FROM '
        'kale_task_counts UNION ALL SELECT task, queue, status, n FROM kale_task_changes) AS c '
        'GROUP BY task, queue, status'))
    return [(task, queue, status, int(n)) for task, queue, status, n in found if n]


def run_rows(conn: Connection, since: float, bucket_sec: int) -> list[MinuteRow]:
    """The runs finished since ``since`` by bucket number (of ``bucket_sec``,
    a multiple of a minute), task and status: whole periods from
    kale_task_periods when the buckets are whole periods, whole minutes from
    kale_task_minutes, and the partial minute at the start from the records
    (a minute of them at most); the changes not folded included."""
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
    """The runs finished from ``since`` to the first whole minute after it,
    by bucket, read from the records."""
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
