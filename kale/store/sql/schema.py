"""The records schema: the tables, created and migrated by Kale, versioned
(docs/explanation/internals-store.md, "The schema")."""
from __future__ import annotations

import logging
from typing import Callable

from sqlalchemy import (
    JSON,
    Column,
    Connection,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    inspect,
    select,
)

from kale.store.sql import counters

logger = logging.getLogger(__name__)

metadata = MetaData()

tasks = Table(
    'kale_tasks', metadata,
    Column('id', String(128), primary_key=True),
    Column('task', String(255), nullable=False),
    Column('queue', String(128), nullable=False),
    Column('status', String(16), nullable=False),
    Column('attempts', Integer, nullable=False, default=0),
    Column('labels', JSON(none_as_null=True)),
    #: {"args": [...], "kwargs": {...}, "exact": bool}; null when the task
    #: says record_args = False.
    Column('inputs', JSON(none_as_null=True)),
    Column('published_at', Float, nullable=False),
    Column('started_at', Float),
    Column('finished_at', Float),
    Column('next_attempt_at', Float),
    Column('duration_sec', Float),
    #: The process that ran the last attempt: a ``kale_workers.id`` (as wide
    #: since schema version 4).
    Column('worker', String(160)),
    Column('error_type', String(255)),
    Column('error_message', Text),
    Column('error_traceback', Text),
    Column('dead_letter_reason', String(512)),
    Column('result', JSON(none_as_null=True)),
    #: The SQS message id its publish was given (schema version 2).
    Column('message_id', String(128)),
    #: ``deduplicated``: the task whose message SQS kept (schema version 2).
    Column('duplicate_of', String(128)),
    #: The task published by retrying this one from its record, once
    #: (schema version 3): a second retry answers with it.
    Column('retried_as', String(128)),
    #: The last bytes an executor program wrote to its standard error
    #: (schema version 6).
    Column('stderr', Text),
    #: A dead run: the task whose dead letter it handles (schema version 8).
    Column('dead_of', String(128)),
    #: When the last event written to the row happened: an older event that
    #: arrives later (another process's writer was slower) changes nothing.
    Column('updated_at', Float, nullable=False),
    Index('kale_tasks_published', 'published_at', 'id'),
    Index('kale_tasks_status', 'status', 'published_at'),
    Index('kale_tasks_task', 'task', 'published_at'),
    Index('kale_tasks_queue', 'queue', 'published_at'),
    Index('kale_tasks_finished', 'finished_at'),
    Index('kale_tasks_message', 'message_id'),
)

workers = Table(
    'kale_workers', metadata,
    Column('id', String(160), primary_key=True),           # host:pid@start
    Column('role', String(16), nullable=False),            # worker | supervisor
    Column('host', String(128), nullable=False),
    Column('pid', Integer, nullable=False),
    Column('queues', JSON(none_as_null=True)),
    Column('version', String(32)),
    Column('started_at', Float, nullable=False),
    Column('heartbeat_at', Float, nullable=False),
    Column('heartbeat_sec', Float, nullable=False),
    Column('stopped_at', Float),
    Column('current_task', String(128)),
    Column('current_task_name', String(255)),
    Column('counts', JSON(none_as_null=True)),
    Index('kale_workers_heartbeat', 'heartbeat_at'),
)

#: The attempts of a task before its last one (the last is its row in
#: kale_tasks): one row per run that failed and was retried (schema version 3).
attempts = Table(
    'kale_attempts', metadata,
    Column('task_id', String(128), primary_key=True),
    Column('attempt', Integer, primary_key=True),
    Column('status', String(16), nullable=False),
    Column('started_at', Float),
    Column('finished_at', Float),
    Column('duration_sec', Float),
    Column('worker', String(160)),
    Column('error_type', String(255)),
    Column('error_message', Text),
    #: Seconds the retry that followed waited (schema version 12).
    Column('retry_delay_sec', Float),
)

#: One row per submitted workflow (schema version 5).
workflows = Table(
    'kale_workflows', metadata,
    Column('id', String(128), primary_key=True),
    Column('status', String(16), nullable=False),         # running, succeeded, failed, cancelled
    Column('labels', JSON(none_as_null=True)),
    #: What the flow gives: its last node's result, or a group's list (JSON,
    #: upstream results standing as markers, see kale.workflow.state).
    Column('result', JSON(none_as_null=True)),
    Column('created_at', Float, nullable=False),
    Column('deadline_at', Float),
    Column('finished_at', Float),
    Index('kale_workflows_created', 'created_at'),
    Index('kale_workflows_deadline', 'status', 'deadline_at'),
)

#: One row per node of a workflow (schema version 5; its claim, 15): see
#: docs/explanation/internals-store.md, "The schema".
workflow_nodes = Table(
    'kale_workflow_nodes', metadata,
    Column('task_id', String(128), primary_key=True),
    Column('workflow_id', String(128), nullable=False),
    Column('task', String(255), nullable=False),
    Column('queue', String(128), nullable=False),
    Column('state', String(16), nullable=False),   # pending, queued, succeeded, failed, cancelled
    Column('missing', Integer, nullable=False),
    Column('upstream', JSON(none_as_null=True)),
    Column('downstream', JSON(none_as_null=True)),
    Column('call', Text),
    Column('result', Text),
    Column('published', Integer, nullable=False, default=0),
    Column('queued_at', Float),
    Column('reason', Text),
    Column('claimed_by', String(160)),
    Column('claimed_until', Float),
    Index('kale_workflow_nodes_workflow', 'workflow_id', 'state'),
    Index('kale_workflow_nodes_unpublished', 'published', 'state'),
)

#: Unique tasks (``unique_for_sec``): which task holds each key (a hash of
#: the task path and its arguments), until when (schema version 7).
unique_keys = Table(
    'kale_unique', metadata,
    Column('key', String(64), primary_key=True),
    Column('task_id', String(128), nullable=False),
    Column('expires_at', Float, nullable=False),
)

#: Webhooks (kale.webhooks, schema version 9): where the events of a topic
#: are delivered, its secret sealed and its row MACed (kale.webhooks.store).
webhooks = Table(
    'kale_webhooks', metadata,
    Column('id', String(64), primary_key=True),
    Column('topic', String(255), nullable=False),
    Column('url', Text, nullable=False),
    Column('method', String(8), nullable=False),
    Column('headers', JSON(none_as_null=True)),
    #: An event is delivered only when its labels include all of these.
    Column('labels', JSON(none_as_null=True)),
    Column('secret', Text, nullable=False),
    Column('mac', String(160), nullable=False),
    Column('active', Integer, nullable=False, default=1),
    Column('created_at', Float, nullable=False),
    Column('updated_at', Float, nullable=False),
    Index('kale_webhooks_topic', 'topic', 'active'),
)

#: Periodic tasks (kale.schedules, schema version 10): the schedulers' lease
#: and each schedule's progress (see "The schema").
scheduler_lease = Table(
    'kale_scheduler_lease', metadata,
    Column('name', String(64), primary_key=True),
    Column('holder', String(160), nullable=False),
    Column('acquired_at', Float, nullable=False),
    Column('expires_at', Float, nullable=False),
)
schedules = Table(
    'kale_schedules', metadata,
    Column('name', String(255), primary_key=True),
    Column('task', String(255), nullable=False),
    Column('watermark', Float, nullable=False),
    Column('last_tick', Float),
    Column('last_task_id', String(128)),
    Column('last_published_at', Float),
)

#: Flow control (kale.flow, schema version 11): token buckets, their
#: reservations and concurrency leases (see "The schema").
rate_buckets = Table(
    'kale_rate_buckets', metadata,
    Column('key', String(255), primary_key=True),
    Column('tokens', Float, nullable=False),
    Column('updated_at', Float, nullable=False),
)
rate_reservations = Table(
    'kale_rate_reservations', metadata,
    Column('key', String(255), primary_key=True),
    Column('holder', String(128), primary_key=True),
    Column('expires_at', Float, nullable=False),
    Index('kale_rate_reservations_expiry', 'key', 'expires_at'),
)
concurrency_leases = Table(
    'kale_concurrency_leases', metadata,
    Column('key', String(255), primary_key=True),
    Column('holder', String(255), primary_key=True),
    Column('worker', String(160), nullable=False),
    Column('expires_at', Float, nullable=False),
    Index('kale_concurrency_leases_worker', 'worker'),
)

#: What operators ask of running workers (kale.store.controls, schema
#: version 13): paused queues and stops (see "The schema").
controls = Table(
    'kale_controls', metadata,
    Column('kind', String(16), primary_key=True),
    Column('name', String(160), primary_key=True),
    Column('requested_at', Float, nullable=False),
)

schema_version = Table('kale_schema', metadata, Column('version', Integer, nullable=False))


Migration = Callable[[Connection], None]


def migration(*tables: Table, add: tuple[tuple[str, str, str], ...] = ()) -> Migration:
    """A migration that creates ``tables`` and adds the columns ``add``
    (table, column, SQL type), each where it is missing."""
    def apply(conn: Connection) -> None:
        for table in tables:
            table.create(conn, checkfirst=True)
        for table_name, name, kind in add:
            if name not in {column['name'] for column in inspect(conn).get_columns(table_name)}:
                conn.exec_driver_sql('ALTER TABLE %s ADD COLUMN %s %s' % (table_name, name, kind))
    return apply


def _add_message_columns_v2(conn: Connection) -> None:
    migration(add=(('kale_tasks', 'message_id', 'VARCHAR(128)'),
                   ('kale_tasks', 'duplicate_of', 'VARCHAR(128)')))(conn)
    if 'kale_tasks_message' not in {index['name'] for index in inspect(conn).get_indexes(
            'kale_tasks')}:
        conn.exec_driver_sql('CREATE INDEX kale_tasks_message ON kale_tasks (message_id)')


def _widen_worker_v4(conn: Connection) -> None:
    """kale_tasks.worker holds a kale_workers.id: give it the same width, so
    a long host name fits both and the two join (SQLite does not enforce a
    width, so only PostgreSQL has anything to change)."""
    if conn.dialect.name == 'postgresql':
        conn.exec_driver_sql('ALTER TABLE kale_tasks ALTER COLUMN worker TYPE VARCHAR(160)')


#: (version, what it does, how): applied in order to bring a store up to date.
MIGRATIONS: list[tuple[int, str, Migration]] = [
    # The tables as this Kale defines them (a new store gets every column at
    # once; the later migrations then find nothing to add).
    (1, 'create kale_tasks and kale_workers', migration(
        tasks, workers, attempts, workflows, workflow_nodes, unique_keys, webhooks,
        scheduler_lease, schedules, controls)),
    (2, 'add kale_tasks.message_id and duplicate_of', _add_message_columns_v2),
    (3, 'add kale_tasks.retried_as and kale_attempts',
     migration(attempts, add=(('kale_tasks', 'retried_as', 'VARCHAR(128)'),))),
    (4, 'widen kale_tasks.worker to a kale_workers.id', _widen_worker_v4),
    (5, 'add kale_workflows and kale_workflow_nodes', migration(workflows, workflow_nodes)),
    (6, 'add kale_tasks.stderr', migration(add=(('kale_tasks', 'stderr', 'TEXT'),))),
    (7, 'add kale_unique', migration(unique_keys)),
    (8, 'add kale_tasks.dead_of', migration(add=(('kale_tasks', 'dead_of', 'VARCHAR(128)'),))),
    (9, 'add kale_webhooks', migration(webhooks)),
    (10, 'add kale_scheduler_lease and kale_schedules', migration(scheduler_lease, schedules)),
    (11, 'add kale_rate_buckets, kale_rate_reservations and kale_concurrency_leases',
     migration(rate_buckets, rate_reservations, concurrency_leases)),
    (12, 'add kale_attempts.retry_delay_sec',
     migration(add=(('kale_attempts', 'retry_delay_sec', 'FLOAT'),))),
    (13, 'add kale_controls (paused queues, stops asked of workers)', migration(controls)),
    (14, 'add the counters kale_task_counts, kale_task_minutes, kale_task_periods and '
         'kale_task_changes, kept by triggers on kale_tasks', counters.install),
    # Nodes left unpublished without a claim (by a Kale from before) are
    # taken over by the sweep after the grace, as before.
    (15, 'add kale_workflow_nodes.claimed_by and claimed_until (who publishes a node, '
         'until when)', migration(add=(('kale_workflow_nodes', 'claimed_by', 'VARCHAR(160)'),
                                       ('kale_workflow_nodes', 'claimed_until', 'FLOAT')))),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]

#: The PostgreSQL advisory lock taken while migrating ('kale' in ASCII).
MIGRATION_LOCK = 0x6B616C65


def current_version(conn: Connection, table: Table = schema_version) -> int:
    """The store's schema version, as ``table`` holds it (0 for an empty store)."""
    table.create(conn, checkfirst=True)
    return int(conn.execute(select(table.c.version)).scalar() or 0)


def migrate(conn: Connection) -> int:
    """Apply every migration the store lacks, inside the caller's write
    transaction; returns the version reached."""
    if conn.dialect.name == 'postgresql':
        conn.exec_driver_sql('SELECT pg_advisory_xact_lock(%d)' % MIGRATION_LOCK)
    version = current_version(conn)
    if version > SCHEMA_VERSION:
        logger.warning('records store has schema version %d, newer than this Kale\'s %d; '
                       'using it as it is', version, SCHEMA_VERSION)
        return version
    for number, what, step in MIGRATIONS:
        if number > version:
            logger.info('records store: migrating to schema version %d: %s', number, what)
            step(conn)
            conn.execute(schema_version.delete())
            conn.execute(schema_version.insert().values(version=number))
            version = number
    return version
