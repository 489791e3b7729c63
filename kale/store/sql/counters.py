"""The task records' counters on a database (see :mod:`kale.store.counts`):
their tables, and the triggers on ``kale_tasks`` that append changes to
``kale_task_changes``, which :func:`roll_up` folds into the counters and reads
add while not folded (docs/explanation/internals-store.md, "The records' counters")."""
from __future__ import annotations

from typing import Optional

from sqlalchemy import Column, Connection, Float, Integer, MetaData, String, Table, text

from kale.store.counts import MINUTE, RAN, CountRow, MinuteRow, first_whole_minute

#: The counters' tables (their own: kale.store.sql.schema's migration 14 makes them).
metadata = MetaData()

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

RAN_SQL = ', '.join("'%s'" % status.value for status in RAN)
_COUNTED = 'status, task, queue, finished_at, duration_sec'


def _values(row: str, sign: str, minute: str) -> str:
    """A change row's values for ``row`` (NEW or OLD)."""
    return ("({row}.task, {row}.queue, {row}.status, CASE WHEN {row}.finished_at IS NOT NULL "
            "AND {row}.status IN ({ran}) THEN {minute} END, {sign}1, "
            "{sign}coalesce({row}.duration_sec, 0), {sign}(CASE WHEN {row}.duration_sec IS NULL "
            "THEN 0 ELSE 1 END))").format(row=row, sign=sign, ran=RAN_SQL,
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
    """The changes of a statement's rows ``source`` (a transition table)."""
    return 'SELECT %s FROM %s AS r' % (_values('r', sign, _PG_MINUTE)[1:-1], source)


def _postgres_triggers() -> list[str]:
    """Statement-level triggers: one run for each statement, whatever rows it
    writes, reading the rows it changed from its transition tables, summed by
    key (a statement of 500 rows appends a few rows)."""
    fold = ('INSERT INTO kale_task_changes SELECT task, queue, status, minute, sum(n), '
            'sum(duration_sum), sum(timed) FROM (%s) AS c(task, queue, status, minute, n, '
            'duration_sum, timed) GROUP BY task, queue, status, minute '
            'HAVING sum(n) <> 0 OR sum(duration_sum) <> 0 OR sum(timed) <> 0;')
    function = (
        'CREATE OR REPLACE FUNCTION kale_task_counted() RETURNS trigger LANGUAGE plpgsql AS $$ '
        "BEGIN IF TG_OP = 'UPDATE' THEN %s ELSIF TG_OP = 'DELETE' THEN %s ELSE %s END IF; "
        'RETURN NULL; END $$' % (
            fold % ('%s UNION ALL %s' % (_pg_changes('old_rows', '-'), _pg_changes('new_rows', ''))),
            fold % _pg_changes('old_rows', '-'), fold % _pg_changes('new_rows', '')))
    return [function] + [
        'CREATE TRIGGER kale_task_counted_%s AFTER %s ON kale_tasks REFERENCING %s FOR EACH '
        'STATEMENT EXECUTE FUNCTION kale_task_counted()' % (event.lower(), event, tables)
        for event, tables in (('INSERT', 'NEW TABLE AS new_rows'),
                              ('UPDATE', 'OLD TABLE AS old_rows NEW TABLE AS new_rows'),
                              ('DELETE', 'OLD TABLE AS old_rows'))]


TRIGGERS = ('kale_task_counted_insert', 'kale_task_counted_update', 'kale_task_counted_delete')


def install(conn: Connection) -> None:
    """Create the tables and the triggers, and count the records there."""
    for table in (task_counts, task_minutes, task_periods, task_changes):
        table.create(conn, checkfirst=True)
    add_triggers(conn)
    recount(conn)
    if conn.dialect.name == 'postgresql':       # the planner knows their size at once
        conn.exec_driver_sql('ANALYZE kale_task_counts, kale_task_minutes, kale_task_periods')


def add_triggers(conn: Connection) -> None:
    postgres = conn.dialect.name == 'postgresql'
    if postgres:                                # a store migrated again
        drop_triggers(conn)
    for statement in _postgres_triggers() if postgres else _sqlite_triggers():
        conn.exec_driver_sql(statement)


def drop_triggers(conn: Connection) -> None:
    """The triggers gone (the benchmark's ``off``): the counters are wrong until
    :func:`add_triggers` and :func:`recount`."""
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
        'GROUP BY {m}, task, status'.format(m=minute, ran=RAN_SQL))
    conn.exec_driver_sql(FOLD_PERIODS.format(source='kale_task_minutes', order=''))


FOLD_COUNTS = (
    'INSERT INTO kale_task_counts (task, queue, status, n) '
    'SELECT task, queue, status, sum(n) FROM {source} GROUP BY task, queue, status '
    '{order} ON CONFLICT (task, queue, status) DO UPDATE SET n = kale_task_counts.n + excluded.n')


def _fold(table: str, key: str, of_change: str) -> str:
    """Add the changes of ``{source}`` summed by (``key``, task, status) to ``table``."""
    return ('INSERT INTO {t} ({k}, task, status, n, duration_sum, timed) '
            'SELECT {c}, task, status, sum(n), sum(duration_sum), sum(timed) FROM {{source}} '
            'WHERE minute IS NOT NULL GROUP BY {c}, task, status {{order}} '
            'ON CONFLICT ({k}, task, status) DO UPDATE SET n = {t}.n + excluded.n, '
            'duration_sum = {t}.duration_sum + excluded.duration_sum, '
            'timed = {t}.timed + excluded.timed').format(t=table, k=key, c=of_change)


FOLD_MINUTES = _fold('kale_task_minutes', 'minute', 'minute')
FOLD_PERIODS = _fold('kale_task_periods', 'period', 'minute / %d' % PER_PERIOD)


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

