"""The outbox's tables in the application's own database (``kale_outbox``,
``kale_outbox_rejected``, ``kale_consumed``), their migrations and the
PostgreSQL notify trigger (docs/explanation/internals-store.md, "The outbox")."""
from __future__ import annotations

from typing import Any, Callable

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Connection,
    Engine,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

from kale.store.sql.schema import current_version, migration

metadata = MetaData()

#: One row per message waiting to be sent.
outbox = Table(
    'kale_outbox', metadata,
    Column('id', BigInteger().with_variant(Integer, 'sqlite'), primary_key=True,
           autoincrement=True),
    Column('task_id', String(128), nullable=False),
    Column('task', String(255), nullable=False),
    Column('queue', String(128), nullable=False),          # its name in the queue config
    Column('body', Text, nullable=False),                  # signed, as SQS gets it
    Column('attributes', JSON(none_as_null=True)),
    Column('delay_sec', Integer, nullable=False, default=0),
    Column('group_id', String(128)),
    Column('dedup_id', String(128)),
    #: The task's ``queued`` record, written by the relay once it is sent
    #: (null with records off).
    Column('record', JSON(none_as_null=True)),
    #: A unique task's key and window (``unique_for_sec``): the relay claims
    #: the key in the task records before it sends.
    Column('unique_key', String(64)),
    Column('unique_for_sec', Float),
    Column('created_at', Float, nullable=False),
    #: The publisher's MAC over the row (kale.outbox.proof; version 2).
    Column('mac', String(128)),
)

#: Rows the relay set aside, unsent: their MAC failed (version 2). Kept as
#: they were, with the id they had in kale_outbox, why, and when.
rejected = Table(
    'kale_outbox_rejected', metadata,
    Column('id', BigInteger().with_variant(Integer, 'sqlite'), primary_key=True,
           autoincrement=True),
    Column('outbox_id', BigInteger, nullable=False),
    *[Column(column.name, column.type) for column in outbox.columns if column.name != 'id'],
    Column('reason', String(500), nullable=False),
    Column('rejected_at', Float, nullable=False),
)

#: The task ids whose effects were applied, once each.
consumed = Table(
    'kale_consumed', metadata,
    Column('task_id', String(128), primary_key=True),
    Column('consumed_at', Float, nullable=False),
    Index('kale_consumed_at', 'consumed_at'),
)

schema_version = Table('kale_outbox_schema', metadata,
                       Column('version', Integer, nullable=False))

#: The channel an insert notifies, and the trigger that does it.
CHANNEL = 'kale_outbox'
NOTIFY_FUNCTION = '''
CREATE OR REPLACE FUNCTION kale_outbox_notify() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('kale_outbox', '');
    RETURN NULL;
END $$ LANGUAGE plpgsql
'''
NOTIFY_TRIGGER = ('CREATE TRIGGER kale_outbox_notify AFTER INSERT ON kale_outbox '
                  'FOR EACH STATEMENT EXECUTE FUNCTION kale_outbox_notify()')

#: The advisory lock taken while migrating ('kalo' in ASCII).
MIGRATION_LOCK = 0x6B616C6F


def _create_v1(conn: Connection) -> None:
    migration(outbox, consumed)(conn)
    if conn.dialect.name == 'postgresql':
        conn.exec_driver_sql(NOTIFY_FUNCTION)
        conn.exec_driver_sql('DROP TRIGGER IF EXISTS kale_outbox_notify ON kale_outbox')
        conn.exec_driver_sql(NOTIFY_TRIGGER)


#: (version, what it does, how), applied in order; ``%(trigger)s`` is said on PostgreSQL only.
MIGRATIONS: list[tuple[int, str, Callable[[Connection], None]]] = [
    (1, 'create kale_outbox and kale_consumed%(trigger)s', _create_v1),
    # Rows of version 1 have no MAC: the relay sets them aside (send what an
    # older Kale's relay left before upgrading it).
    (2, 'add kale_outbox.mac and kale_outbox_rejected',
     migration(rejected, add=(('kale_outbox', 'mac', 'VARCHAR(128)'),))),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]


def open_database(url: str, setting: str = 'OUTBOX_URL') -> Engine:
    """An engine on the application's database at ``url`` whose
    ``engine.begin()`` is a real transaction (on SQLite too: BEGIN is said
    explicitly, as SQLAlchemy's documentation advises for pysqlite)."""
    from sqlalchemy import create_engine, event

    from kale.exceptions import ImproperlyConfigured
    from kale.store.files import prepare_database
    from kale.store.sql.urls import engine_url, kind_of, safe_url, sqlite_connections
    try:
        target = engine_url(url)
        if target.get_backend_name() != 'sqlite':
            return create_engine(target, pool_pre_ping=True)
        engine = create_engine(target, connect_args={'check_same_thread': False,
                                                     'timeout': 30})
    except Exception as exc:
        raise ImproperlyConfigured('%s %r cannot be used: %s' % (setting, safe_url(url), exc),
                                   public='%s (%s) cannot be used' % (setting, kind_of(url))
                                   ) from exc
    if target.database and target.database != ':memory:':
        prepare_database(str(target.database), setting)         # owner-only (0600)

    sqlite_connections(engine, 'journal_mode = WAL')

    @event.listens_for(engine, 'begin')
    def begin(conn: Connection) -> None:
        # A reader asks for a deferred BEGIN: in WAL mode it blocks no writer.
        conn.exec_driver_sql('BEGIN' if conn.get_execution_options().get('kale_read')
                             else 'BEGIN IMMEDIATE')
    return engine


def create_statements(dialect_name: str) -> list[str]:
    """The SQL that creates the tables at :data:`SCHEMA_VERSION` in an empty
    database of ``dialect_name``: what ``init`` would do, for a migration tool
    that runs SQL in its own transaction (Django's migrations)."""
    from sqlalchemy.schema import CreateIndex, CreateTable
    dialect = _dialect(dialect_name)
    statements = []
    for table in (outbox, rejected, consumed, schema_version):
        statements.append(str(CreateTable(table).compile(dialect=dialect)).strip())
        statements += [str(CreateIndex(index).compile(dialect=dialect))
                       for index in sorted(table.indexes, key=lambda index: str(index.name))]
    statements.append('INSERT INTO %s (version) VALUES (%d)' % (schema_version.name,
                                                                SCHEMA_VERSION))
    if dialect_name == 'postgresql':
        statements += [NOTIFY_FUNCTION.strip(), NOTIFY_TRIGGER]
    return statements


def drop_statements(dialect_name: str) -> list[str]:
    """The SQL that drops what :func:`create_statements` made."""
    tables = (schema_version, consumed, rejected, outbox)
    statements = ['DROP TABLE IF EXISTS %s' % table.name for table in tables]
    if dialect_name == 'postgresql':
        statements.append('DROP FUNCTION IF EXISTS kale_outbox_notify()')
    return statements


def _dialect(name: str) -> Any:
    from sqlalchemy.dialects import postgresql, sqlite
    if name not in ('sqlite', 'postgresql'):
        from kale.exceptions import ImproperlyConfigured
        raise ImproperlyConfigured('the outbox works on SQLite and PostgreSQL, not on %s'
                                   % name[:100])
    return postgresql.dialect() if name == 'postgresql' else sqlite.dialect()


def init(engine: Engine) -> list[str]:
    """Bring the outbox tables up to date; what was applied (empty when nothing was)."""
    applied = []
    with engine.begin() as conn:
        postgres = conn.dialect.name == 'postgresql'
        if postgres:
            conn.exec_driver_sql('SELECT pg_advisory_xact_lock(%d)' % MIGRATION_LOCK)
        version = current_version(conn, schema_version)
        for number, what, apply in MIGRATIONS:
            if number > version:
                apply(conn)
                said = what % {'trigger': ' and the notify trigger' if postgres else ''}
                applied.append('%d: %s' % (number, said))
                version = number
        conn.execute(schema_version.delete())
        conn.execute(schema_version.insert().values(version=version))
    return applied

