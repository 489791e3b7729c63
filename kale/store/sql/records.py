"""The records store: one SQLAlchemy Core engine on RECORDS_URL, the
statements that write records, and its facets, each made (and its module
imported) when first used (docs/explanation/internals-store.md)."""
from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Generic, Iterator, Optional, Sequence, TypeVar

from kale.config import Config
from kale.exceptions import ImproperlyConfigured, RecordsUnavailableError
from kale.statuses import TaskStatus
from kale.store.sql import cancels, counters, schema
from kale.store.sql.schema import attempts, tasks, unique_keys, workers, workflow_nodes, workflows
from kale.store.sql.urls import engine_url, kind_of, make_engine, safe_url, unavailable

try:
    from sqlalchemy import Connection, and_, or_, select
    from sqlalchemy.exc import SQLAlchemyError
except ImportError as exc:  # pragma: no cover - depends on the extras installed
    raise ImproperlyConfigured('task records need SQLAlchemy: pip install "kale-sqs[records]" '
                               '(%s)' % exc) from exc

from kale.store.records import ENDED_TASKS, ENDED_WORKFLOWS, WAITING, ended_waiting, expired, rows_to_write
from kale.store.sealing import Sealer
from kale.store.sql.driver import Driver, chunks, insert_for, same_keys

if TYPE_CHECKING:
    from kale.store.controls import ControlStore
    from kale.store.flow import FlowStore
    from kale.store.records import RecordQueries, RecordsStore
    from kale.store.schedules import ScheduleStore
    from kale.store.unique import UniqueStore
    from kale.store.webhooks import WebhookStore
    from kale.store.workflows import WorkflowStore

logger = logging.getLogger(__name__)
T = TypeVar('T')

#: Rows deleted by one transaction of a delete of many records.
CHUNK_ROWS = 1000
#: SQLite: the pause between two chunks, for a writer waiting for the lock
#: (docs/explanation/internals-store.md, "Questions about many records").
SQLITE_PAUSE_SEC = 0.1


class _Facet(Generic[T]):
    """A facet made on first use from ``kale.store.sql.<module>.<name>(store)``, then kept."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __set_name__(self, owner: type, attribute: str) -> None:
        self.attribute = attribute

    def __get__(self, store: Any, owner: type) -> T:
        made: T = getattr(importlib.import_module('kale.store.sql.' + self.module), self.name)(store)
        store.__dict__[self.attribute] = made
        return made


class OnStore:
    """A facet that runs its statements through its database store."""

    def __init__(self, store: 'RecordStore'):
        self.store = store


class RecordStore:
    """Reads and writes task and worker records on one database; gives each
    facet of a store (see :mod:`kale.store`)."""

    queries: _Facet[RecordQueries] = _Facet('queries', 'Queries')
    schedules: _Facet[ScheduleStore] = _Facet('tables', 'SQLSchedules')
    unique: _Facet[UniqueStore] = _Facet('tables', 'SQLUnique')
    flow: _Facet[FlowStore] = _Facet('tables', 'SQLFlow')
    workflows: _Facet[WorkflowStore] = _Facet('workflows', 'SQLWorkflows')
    webhooks: _Facet[WebhookStore] = _Facet('tables', 'SQLWebhooks')
    controls: _Facet[ControlStore] = _Facet('tables', 'SQLControls')

    def __init__(self, url: str, config: Config):
        self.url = url
        #: Whose keys seal, open and sign what the store holds.
        self.config = config
        self.engine = make_engine(url)
        target = engine_url(url)
        #: SQLite in a file: cancellations signal the workers through a file
        #: beside it, and a worker queries only for batches that may hold one
        #: (see :mod:`kale.store.sql.cancels`).
        self.cancel_signal = cancels.signal_path(target)
        #: The SQLite database file (None for a database server).
        self.database_file: Optional[str] = (
            self.cancel_signal[:-len(cancels.SIGNAL_SUFFIX)] if self.cancel_signal else None)
        self._cancelled_ids = cancels.CancelledIds(self.cancel_signal) \
            if self.cancel_signal else None
        self.dialect = self.engine.dialect.name
        self._insert = insert_for(self.dialect)
        self._migrated = False
        self._migrate_lock = threading.Lock()
        #: The statements run straight on the driver, built once: building
        #: one costs more than executing it for a few rows.
        self.driver = Driver(self.engine.dialect)
        #: The connection the per-batch cancellation checks use, and its
        #: cursor, kept between them.
        self._check_connection: Any = None
        self._check_cursor: Any = None
        self._check_lock = threading.Lock()

    def __repr__(self) -> str:
        return 'RecordStore(%r)' % safe_url(self.url)

    @property
    def records(self) -> 'RecordsStore':
        """The task records' facet (:mod:`kale.store.records`): the store itself."""
        return self

    # --- connections -------------------------------------------------------------

    @contextlib.contextmanager
    def begin(self, write: bool = False) -> Iterator[Connection]:
        """A connection in a transaction, committed at the end of the block.
        Database errors come out as RecordsUnavailableError."""
        self.migrate()
        with self._transaction(write) as conn:
            yield conn

    @contextlib.contextmanager
    def _transaction(self, write: bool) -> Iterator[Connection]:
        try:
            with self.engine.connect() as conn:
                conn.begin()        # committed below, also when only the driver was used
                if self.dialect == 'sqlite':
                    conn.exec_driver_sql('BEGIN IMMEDIATE' if write else 'BEGIN')
                try:
                    yield conn
                except BaseException:
                    conn.rollback()
                    raise
                conn.commit()
        except (SQLAlchemyError,) + raw_errors() as exc:
            raise unavailable('records store', self.url, exc) from exc

    def changed(self, statement: Any) -> int:
        """Run a write in a transaction of its own: how many rows it changed."""
        with self.begin(write=True) as conn:
            return int(conn.execute(statement).rowcount or 0)

    def read(self, query: Any) -> list[Any]:
        """A query's rows, read in a transaction of its own."""
        with self.begin() as conn:
            return list(conn.execute(query).all())

    def migrate(self) -> None:
        """Create or migrate the schema, once per process."""
        if self._migrated:
            return
        with self._migrate_lock:
            if not self._migrated:
                with self._transaction(write=True) as conn:
                    schema.migrate(conn)
                self._migrated = True

    def dispose(self) -> None:
        with self._check_lock:
            self._drop_check_connection()
            if self._cancelled_ids is not None:
                self._cancelled_ids.close()
        self.engine.dispose()

    def _drop_check_connection(self) -> None:
        """Close the kept connection (after an error: the next check connects again)."""
        raw, self._check_connection, self._check_cursor = self._check_connection, None, None
        if raw is not None:
            try:
                raw.invalidate()
            except Exception as exc:        # closing a broken connection may fail too
                logger.debug('records: closing a broken connection failed: %s', exc)

    # --- writes -----------------------------------------------------------------------

    def write(self, published: Sequence[dict[str, Any]], events: Sequence[dict[str, Any]],
              worker_rows: Sequence[dict[str, Any]],
              attempt_rows: Optional[Sequence[dict[str, Any]]] = None,
              sealed: bool = False) -> None:
        """One statement for each set of columns the rows have (a column left out is
        null). ``sealed``: a spool's events, an outbox publisher's publications."""
        published, events, attempt_rows = rows_to_write(self.sealer, published, events,
                                                        attempt_rows, sealed)
        with self.begin(write=True) as conn:
            for kind, rows in (('published', published), ('event', events)):
                for group in same_keys(rows):
                    self._executemany(conn, kind, group)
            for row in worker_rows:
                conn.execute(self._worker_statement(row), row)
            if attempt_rows:
                insert = self._insert(attempts)
                conn.execute(insert.on_conflict_do_nothing(
                    index_elements=[attempts.c.task_id, attempts.c.attempt]), list(attempt_rows))

    def _executemany(self, conn: Connection, kind: str, rows: Sequence[dict[str, Any]]) -> None:
        """Straight to the driver: SQLAlchemy's per-row work costs more than the database's."""
        statement = self.driver.write(kind, tuple(rows[0]))   # rows share keys (same_keys)
        cursor = conn.connection.cursor()
        try:
            if statement.rows_per_statement > 1:
                # internals-store.md, "Statements on the raw driver", says why
                for chunk in chunks(rows, statement.rows_per_statement, statement.ids_once):
                    cursor.execute(*statement.many(chunk))
            else:
                cursor.executemany(statement.sql, statement.parameters(rows))
        finally:
            cursor.close()

    @functools.cached_property
    def sealer(self) -> Sealer:
        """Signs stored inputs and seals what the database may not hold in
        clear, under its configuration's keys (:mod:`kale.store.sealing`)."""
        return Sealer(self.config)

    def attempts(self, task_id: str) -> list[dict[str, Any]]:
        return [self.sealer.open_row(dict(row._mapping)) for row in self.read(select(attempts).where(
            attempts.c.task_id == task_id).order_by(attempts.c.attempt))]

    def _worker_statement(self, row: dict[str, Any]) -> Any:
        insert = self._insert(workers)
        values = {name: insert.excluded[name] for name in row if name != 'id'}
        return insert.on_conflict_do_update(index_elements=[workers.c.id], set_=values)

    def cancel(self, task_id: str, now: Optional[float] = None) -> bool:
        """On SQLite the workers are told through the signal file, before (a
        cancellation that cannot tell them is not made) and after."""
        now = time.time() if now is None else now
        self._signal_cancel()
        with self.begin(write=True) as conn:
            done = bool(conn.execute(tasks.update().where(
                tasks.c.id == task_id, tasks.c.status.in_(WAITING)).values(
                **ended_waiting(TaskStatus.CANCELLED, now))).rowcount)
        if done:
            try:
                self._signal_cancel()
            except RecordsUnavailableError as exc:     # the cancellation stands
                logger.error('records: task %s is cancelled, but workers on this machine may '
                             'not see it until the next cancellation: %s', task_id, exc)
        return done

    def _signal_cancel(self) -> None:
        if self.cancel_signal is None:
            return
        try:
            cancels.send(self.cancel_signal)
        except OSError as exc:
            raise RecordsUnavailableError(
                'records store %s: cannot write the cancellation signal %s: %s'
                % (safe_url(self.url), self.cancel_signal, exc),
                public='records store (%s): cannot write the cancellation signal: %s'
                % (kind_of(self.url), exc.strerror or 'error')) from exc

    def purge_expired(self, succeeded_ttl: Optional[float], failed_ttl: Optional[float],
                      now: Optional[float] = None, queued_ttl: Optional[float] = None) -> int:
        """Queued and scheduled records count from their last event or their due
        time, whichever is later: past it SQS no longer holds their message."""
        now = time.time() if now is None else now
        conditions = _expired_tasks(succeeded_ttl, failed_ttl, queued_ttl, now)
        if not conditions:
            return 0
        ended = [and_(workflows.c.status.in_(statuses), workflows.c.finished_at < before)
                 for statuses, before in expired(ENDED_WORKFLOWS, succeeded_ttl, failed_ttl, now)]
        deleted = self.delete_in_chunks(or_(*conditions))
        with self.begin(write=True) as conn:
            if failed_ttl is not None:     # workers that stopped or went silent long ago
                conn.execute(workers.delete().where(workers.c.heartbeat_at < now - failed_ttl))
            conn.execute(unique_keys.delete().where(unique_keys.c.expires_at < now))
            if ended:
                gone = select(workflows.c.id).where(or_(*ended)).scalar_subquery()
                conn.execute(workflow_nodes.delete().where(workflow_nodes.c.workflow_id.in_(gone)))
                conn.execute(workflows.delete().where(or_(*ended)))
        return deleted

    def delete_in_chunks(self, condition: Any) -> int:
        """Delete the records ``condition`` matches, :data:`CHUNK_ROWS` a transaction,
        so that the workers' writes go in between; how many."""
        deleted = 0
        while True:
            with self.begin(write=True) as conn:
                chunk = select(tasks.c.id).where(condition).limit(CHUNK_ROWS).scalar_subquery()
                gone = int(conn.execute(tasks.delete().where(tasks.c.id.in_(chunk))).rowcount or 0)
                counters.roll_up(conn)
            deleted += gone
            if gone < CHUNK_ROWS:
                break
            if self.dialect == 'sqlite':
                time.sleep(SQLITE_PAUSE_SEC)
        with self.begin(write=True) as conn:
            counters.roll_up(conn, tidy=True)
        return deleted

    def roll_up(self) -> bool:
        """:func:`kale.store.sql.counters.roll_up`: a writer's thread does it every few seconds."""
        with self.begin(write=True) as conn:
            return counters.roll_up(conn)

    def claim_retry(self, task_id: str, marker: str) -> bool:
        """A conditional update (see :mod:`kale.records.retries`)."""
        return bool(self.changed(tasks.update().where(
            tasks.c.id == task_id, tasks.c.retried_as.is_(None)).values(retried_as=marker)))

    def replace_retry(self, task_id: str, marker: str, value: Optional[str]) -> None:
        self.changed(tasks.update().where(tasks.c.id == task_id, tasks.c.retried_as == marker)
                     .values(retried_as=value))

    def retried_as(self, task_id: str) -> Optional[str]:
        found = self.read(select(tasks.c.retried_as).where(tasks.c.id == task_id))
        return str(found[0][0]) if found and found[0][0] is not None else None

    def mark_purged(self, queue: str, before: float, now: Optional[float] = None) -> int:
        now = time.time() if now is None else now
        return self.changed(tasks.update().where(
            tasks.c.queue == queue, tasks.c.status.in_(WAITING),
            tasks.c.updated_at <= before).values(**ended_waiting(TaskStatus.PURGED, now)))

    def message_owners(self, message_ids: Sequence[str],
                       not_ids: Sequence[str] = ()) -> dict[str, str]:
        query = select(tasks.c.message_id, tasks.c.id).where(
            tasks.c.message_id.in_(list(message_ids))).order_by(tasks.c.published_at.desc())
        if not_ids:
            query = query.where(tasks.c.id.not_in(list(not_ids)))
        return {message_id: task_id for message_id, task_id in self.read(query)}

    # --- reads ------------------------------------------------------------------------

    def get(self, task_id: str) -> Optional[dict[str, Any]]:
        found = self.read(select(tasks).where(tasks.c.id == task_id))
        return dict(found[0]._mapping) if found else None

    def cancelled_among(self, task_ids: Sequence[str]) -> set[str]:
        """At most one query for a whole batch, and on a SQLite file none unless
        one of them may be (see :mod:`kale.store.sql.cancels`)."""
        return self._among(TaskStatus.CANCELLED, task_ids, self._cancelled_ids)

    def succeeded_among(self, task_ids: Sequence[str]) -> set[str]:
        return self._among(TaskStatus.SUCCEEDED, task_ids, None)

    def _among(self, status: str, task_ids: Sequence[str],
               kept: Optional[cancels.CancelledIds]) -> set[str]:
        """Which of ``task_ids`` have ``status``: on the worker's path, straight
        to the driver, on a cursor kept for it (``kept``: the candidates only)."""
        if not task_ids:
            return set()
        self.migrate()
        with self._check_lock:
            if kept is not None:
                task_ids = kept.candidates(task_ids, self._all_cancelled)
                if not task_ids:
                    return set()
            return {row[0] for row in self._check(*self.driver.status_among(status, list(task_ids)))}

    def _all_cancelled(self, limit: int) -> list[str]:
        """Up to ``limit`` ids of cancelled tasks (under the check lock)."""
        return [row[0] for row in self._check(*self.driver.all_cancelled(limit))]

    def _check(self, sql: str, params: Any) -> list[Any]:
        """Run a cancellation check's query on the kept connection (under the
        check lock)."""
        try:
            cursor = self._check_cursor
            if cursor is None:      # a pooled driver connection: the checks' reads need no transaction
                raw = self._check_connection = self.engine.raw_connection()
                if self.dialect == 'postgresql':
                    raw.driver_connection.autocommit = True  # type: ignore[union-attr]
                cursor = self._check_cursor = raw.cursor()
            cursor.execute(sql, params)
            return list(cursor.fetchall())
        except (SQLAlchemyError,) + raw_errors() as exc:
            self._drop_check_connection()
            raise unavailable('records store', self.url, exc) from exc


def _expired_tasks(succeeded_ttl: Optional[float], failed_ttl: Optional[float],
                   queued_ttl: Optional[float], now: float) -> list[Any]:
    """The conditions of the tasks past their TTL (one per TTL given)."""
    conditions = [and_(tasks.c.status.in_(statuses), tasks.c.finished_at < before)
                  for statuses, before in expired(ENDED_TASKS, succeeded_ttl, failed_ttl, now)]
    if queued_ttl is not None:          # a task due later waits in SQS until then
        conditions.append(and_(tasks.c.status.in_(WAITING),
                               tasks.c.updated_at < now - queued_ttl,
                               or_(tasks.c.next_attempt_at.is_(None),
                                   tasks.c.next_attempt_at < now - queued_ttl)))
    return conditions


def raw_errors() -> tuple[type[Exception], ...]:
    """The drivers' own errors (a raw connection's queries raise those)."""
    import sqlite3
    try:
        import psycopg
    except ImportError:
        return (sqlite3.Error,)
    return (sqlite3.Error, psycopg.Error)


__all__ = ['RecordStore', 'engine_url', 'safe_url']
