"""The outbox's facet on the application's database (see
:mod:`kale.store.outbox`): PostgreSQL's concurrent rounds, SQLite's one relay
(docs/explanation/internals-store.md, "The outbox")."""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import threading
from typing import Any, Callable, ContextManager, Iterator, Optional, Sequence

from sqlalchemy import Connection, Engine, bindparam, delete, event, func, select
from sqlalchemy.exc import SQLAlchemyError

from kale.exceptions import OutboxError
from kale.store.files import open_private
from kale.store.outbox import ROW_FIELDS, OutboxRow
from kale.store.sql.driver import insert_for
from kale.store.sql.outbox_schema import CHANNEL, consumed, init, outbox, rejected
from kale.store.sql.urls import unavailable

logger = logging.getLogger(__name__)

#: The advisory lock of the round that claims FIFO rows ('kalf').
FIFO_LOCK = 0x6B616C66
#: The columns the publish side writes (all but the id).
WRITTEN = ROW_FIELDS[1:]
_JSON_COLUMNS = ('attributes', 'record')


def _take(*where: Any, skip_locked: bool = True) -> Any:
    """Delete the first rows ``where`` says, locked, returning them."""
    picked = select(outbox.c.id).where(*where).order_by(outbox.c.id).limit(
        bindparam('limit')).with_for_update(skip_locked=skip_locked)
    return delete(outbox).where(outbox.c.id.in_(picked.scalar_subquery())).returning(*outbox.c)


#: SQLite's one relay reads; PostgreSQL's take any rows, the standard ones
#: (without a deduplication id, which every FIFO row has), or the FIFO ones.
_READ = select(outbox).order_by(outbox.c.id).limit(bindparam('limit'))
_ANY = _take()
_STANDARD = _take(outbox.c.dedup_id.is_(None))
_FIFO = _take(outbox.c.dedup_id.is_not(None), skip_locked=False)


class _Claim:
    def __init__(self, conn: Optional[Connection], rows: list[OutboxRow]):
        self.conn = conn
        self.rows = rows
        self.rejected: list[dict[str, Any]] = []

    def set_aside(self, rejected_rows: Sequence[tuple[OutboxRow, str]], now: float) -> None:
        self.rejected += [dict({name: getattr(row, name) for name in WRITTEN}, outbox_id=row.id,
                               reason=reason[:500], rejected_at=now)
                          for row, reason in rejected_rows]
        if self.conn is not None and self.rejected:     # PostgreSQL: in the round's transaction
            self.conn.execute(rejected.insert(), self.rejected)
            self.rejected = []


class SQLOutbox:
    """The relay's side of the outbox on ``engine`` (made by
    :func:`kale.outbox.open_database`)."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.concurrent = engine.dialect.name == 'postgresql'
        self._lock_file: Optional[int] = None
        if self.concurrent and not event.contains(engine, 'connect', _asynchronous_commit):
            event.listen(engine, 'connect', _asynchronous_commit)

    def init(self) -> list[str]:
        return init(self.engine)

    def hold(self) -> None:
        database = self.engine.url.database
        if self.concurrent or not database or database == ':memory:':
            return
        path = os.path.abspath(database) + '-kale-relay.lock'
        try:
            handle = open_private(path, os.O_RDWR | os.O_CREAT)     # never through a link
        except OSError as exc:
            raise OutboxError('the relay\'s lock file %s cannot be opened (%s): it must be a '
                              'file of this user, not a symbolic link' % (path, exc.strerror)) \
                from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(handle)
            raise OutboxError('another relay already sends the outbox of %s: SQLite allows one '
                              'relay per database (use PostgreSQL for several)' % database) \
                from None
        self._lock_file = handle

    def let_go(self) -> None:
        if self._lock_file is not None:
            os.close(self._lock_file)
            self._lock_file = None

    @contextlib.contextmanager
    def claim(self, limit: int, fifo: bool) -> Iterator[_Claim]:
        if self.concurrent:              # deleted as claimed: the delete commits at the end
            with self.engine.begin() as conn:
                yield _Claim(conn, self._claim_concurrent(conn, limit, fifo))
            return
        with self.engine.connect().execution_options(kale_read=True) as conn, conn.begin():
            rows = [OutboxRow(*row) for row in conn.execute(_READ, {'limit': limit}).all()]
        claim = _Claim(None, rows)
        yield claim
        if rows:
            with self.engine.begin() as conn:
                conn.execute(delete(outbox).where(outbox.c.id.in_([row.id for row in rows])))
                if claim.rejected:
                    conn.execute(rejected.insert(), claim.rejected)

    @staticmethod
    def _claim_concurrent(conn: Connection, limit: int, fifo: bool) -> list[OutboxRow]:
        if not fifo:                     # no FIFO queue configured: every row is any round's
            rows = list(conn.execute(_ANY, {'limit': limit}).all())
        else:
            rows = list(conn.execute(_STANDARD, {'limit': limit}).all())
            if len(rows) < limit and conn.exec_driver_sql(
                    'SELECT pg_try_advisory_xact_lock(%d)' % FIFO_LOCK).scalar():
                rows += conn.execute(_FIFO, {'limit': limit - len(rows)}).all()
        # the table's columns are the row's fields, in order
        return sorted((OutboxRow(*row) for row in rows), key=lambda row: row.id)

    def pending(self, now: float, url: str = '') -> tuple[int, Optional[float]]:
        """Rows waiting and the oldest's age; RecordsUnavailableError naming
        ``url`` when the database does not answer (when ``url`` is given)."""
        try:
            with self.engine.connect().execution_options(kale_read=True) as conn, conn.begin():
                count, oldest = conn.execute(select(func.count(),
                                                    func.min(outbox.c.created_at))).one()
        except SQLAlchemyError as exc:
            if not url:
                raise
            raise unavailable('outbox', url, exc) from None
        return int(count), (now - oldest) if oldest is not None else None

    def purge_consumed(self, before: float) -> int:
        with self.engine.begin() as conn:
            return int(conn.execute(delete(consumed).where(
                consumed.c.consumed_at < before)).rowcount or 0)

    def listen(self, wake: threading.Event) -> Optional['_Listener']:
        return _Listener(self.engine, wake) if self.concurrent else None


#: What a database that does not answer raises, for the relay's back-off.
DATABASE_ERRORS = (SQLAlchemyError,)


def outbox_on(found: Any) -> Any:
    """The outbox store on a SQLAlchemy engine, or the store given."""
    return SQLOutbox(found) if isinstance(found, Engine) else found


def writer_in(conn: Any) -> 'SQLOutboxWriter':
    """The writer into ``conn``'s transaction: a SQLAlchemy Connection, or a
    Session's connection; OutboxError for anything else."""
    if isinstance(conn, Connection):
        return SQLOutboxWriter(conn)
    connection = getattr(conn, 'connection', None)
    if callable(connection):               # a Session: its connection in its transaction
        found = connection()
        if isinstance(found, Connection):
            return SQLOutboxWriter(found)
    raise OutboxError('outbox: conn must be a SQLAlchemy Connection or Session in an open '
                      'transaction, got %s' % type(conn).__name__)


#: What the errors of a writer on a SQLAlchemy connection say to do.
INIT_HINT = 'run `kale outbox init --url URL` on this database first?'


@contextlib.contextmanager
def _writing(table: str, hint: str, errors: tuple[type[BaseException], ...]) -> Iterator[None]:
    """The database's ``errors`` as one OutboxError line ending in ``hint``."""
    try:
        yield
    except errors as exc:
        raise OutboxError('%s: cannot insert into %s (%s): %s' % (
            'outbox' if table == outbox.name else 'consume_once', table, hint,
            str(exc).splitlines()[0])) from exc


class SQLOutboxWriter:
    """The publish side on the caller's connection, in its transaction."""

    def __init__(self, connection: Connection):
        self.connection = connection

    def insert(self, rows: Sequence[dict[str, Any]]) -> None:
        with _writing(outbox.name, INIT_HINT, DATABASE_ERRORS):
            sql = DRIVER_INSERTS.get(self.connection.dialect.driver)
            if sql is None:
                self.connection.execute(outbox.insert(), list(rows))
                return
            params = _driver_params(rows)     # the caller's rows, as the driver takes them
            self.connection.exec_driver_sql(sql, params[0] if len(params) == 1 else params)

    def consume(self, task_id: str, now: float) -> bool:
        statement = insert_for(self.connection.dialect.name)(consumed).values(
            task_id=task_id, consumed_at=now).on_conflict_do_nothing(
            index_elements=[consumed.c.task_id]).returning(consumed.c.task_id)
        with _writing(consumed.name, INIT_HINT, DATABASE_ERRORS):
            return self.connection.execute(statement).first() is not None


#: The insert and the consume in the DB-API's ``format`` paramstyle (``%s``),
#: which SQLite (3.35 on) and PostgreSQL both run.
FORMAT_INSERT = 'INSERT INTO %s (%s) VALUES (%s)' % (outbox.name, ', '.join(WRITTEN),
                                                     ', '.join(['%s'] * len(WRITTEN)))
FORMAT_CONSUME = ('INSERT INTO %s (task_id, consumed_at) VALUES (%%s, %%s) '
                  'ON CONFLICT (task_id) DO NOTHING RETURNING task_id' % consumed.name)
#: The insert in the driver's own parameter style, by driver (another's: SQLAlchemy's).
DRIVER_INSERTS = {'psycopg': FORMAT_INSERT, 'psycopg2': FORMAT_INSERT,
                  'pysqlite': FORMAT_INSERT.replace('%s', '?')}


class CursorOutboxWriter:
    """The publish side on a connection another library holds (Django's):
    ``cursor()`` opens one of its DB-API cursors taking ``%s`` parameters, whose
    ``errors`` become one OutboxError line ending in ``hint``."""

    def __init__(self, cursor: Callable[[], ContextManager[Any]],
                 errors: tuple[type[BaseException], ...], hint: str):
        self.cursor = cursor
        self.errors = errors
        self.hint = hint

    def insert(self, rows: Sequence[dict[str, Any]]) -> None:
        with _writing(outbox.name, self.hint, self.errors), self.cursor() as cursor:
            cursor.executemany(FORMAT_INSERT, _driver_params(rows))

    def consume(self, task_id: str, now: float) -> bool:
        with _writing(consumed.name, self.hint, self.errors), self.cursor() as cursor:
            cursor.execute(FORMAT_CONSUME, [task_id, now])
            return cursor.fetchone() is not None


def _driver_params(rows: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The rows' values in :data:`WRITTEN`'s order, the JSON columns as JSON text."""
    for row in rows:
        for name in _JSON_COLUMNS:
            if row[name] is not None:
                row[name] = json.dumps(row[name], separators=(',', ':'))
    return [tuple(row[name] for name in WRITTEN) for row in rows]


def _asynchronous_commit(dbapi_connection: Any, record: Any) -> None:
    """The relay's commits do not wait for the server's disk: a delete lost
    in a crash of the database server sends its rows again (at least once)."""
    with dbapi_connection.cursor() as cursor:
        cursor.execute('SET synchronous_commit = off')
    dbapi_connection.commit()


class _Listener:
    """LISTEN kale_outbox on a connection of its own, on a thread that sets
    ``wake`` at each notification."""

    def __init__(self, engine: Engine, wake: threading.Event):
        self.wake = wake
        self._closed = threading.Event()
        self._url = engine.url.set(drivername='postgresql').render_as_string(hide_password=False)
        self._thread = threading.Thread(target=self._run, name='kale-outbox-listen', daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import psycopg
        while not self._closed.is_set():
            try:
                with psycopg.connect(self._url, autocommit=True) as conn:
                    conn.execute('LISTEN %s' % CHANNEL)
                    self.wake.set()               # anything sent while not listening
                    while not self._closed.is_set():
                        for _ in conn.notifies(timeout=1.0, stop_after=1):
                            self.wake.set()
            except psycopg.Error as exc:
                logger.warning('outbox relay: LISTEN failed (%s); polling meanwhile',
                               str(exc).splitlines()[0])
                self._closed.wait(2.0)

    def close(self) -> None:
        self._closed.set()
        self._thread.join(5)
