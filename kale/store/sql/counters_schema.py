"""The tables of the task records' counters and the triggers that keep them
(see :mod:`kale.store.sql.counters`, which reads and folds them); schema
version 14 makes them (:func:`install`)."""
from __future__ import annotations

from sqlalchemy import Column, Connection, Float, Integer, MetaData, String, Table

from kale.store.counts import MINUTE, RAN

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
