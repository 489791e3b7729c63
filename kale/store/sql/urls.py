"""Database URLs (the one to connect with, the one to show), and the engine
on one: SQLite in WAL mode (Kale says BEGIN itself), or PostgreSQL through
psycopg, its pooled connections pinged only after :data:`PING_IDLE_SEC` idle
(docs/explanation/internals-store.md, "The engine")."""
from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Optional

import sqlalchemy
from sqlalchemy import Engine, event
from sqlalchemy.exc import SQLAlchemyError

from kale.exceptions import ImproperlyConfigured, RecordsUnavailableError
from kale.store import files
from kale.store.sql import cancels

#: Seconds a SQLite writer waits for another process's write transaction.
SQLITE_BUSY_TIMEOUT_MS = 10000
#: A pooled PostgreSQL connection idle for longer is pinged before it is used.
PING_IDLE_SEC = 1.0


def engine_url(url: str) -> sqlalchemy.URL:
    """The URL to connect with: ``postgresql://`` means psycopg (version 3),
    the driver ``kale-sqs[postgres]`` installs."""
    parsed = sqlalchemy.make_url(url)
    if parsed.drivername == 'postgresql':
        parsed = parsed.set(drivername='postgresql+psycopg')
    return parsed


def postgresql_url(user: Optional[str], password: Optional[str], host: Optional[str],
                   port: Optional[int], database: Optional[str],
                   query: Mapping[str, str]) -> str:
    """The ``postgresql://`` URL of these parts, each quoted as a URL needs."""
    return sqlalchemy.URL.create('postgresql', username=user, password=password, host=host,
                                 port=port, database=database, query=dict(query)
                                 ).render_as_string(hide_password=False)


def safe_url(url: str) -> str:
    """The URL with any password hidden, for messages and logs."""
    try:
        return sqlalchemy.make_url(url).render_as_string(hide_password=True)
    except Exception:
        return '<unparsable URL>'


def kind_of(url: str) -> str:
    """How an error for an API caller names the database at ``url``: its
    kind (``sqlite``, ``postgresql``), never its file or its host."""
    try:
        return sqlalchemy.make_url(url).get_backend_name()
    except Exception:
        return 'database'


def unavailable(what: str, url: str, problem: object) -> RecordsUnavailableError:
    """The error of ``what`` (the records store, an outbox) at ``url`` that
    did not answer: the URL and the driver's ``problem`` (its first line);
    for an API caller (``public``) the database by its kind only."""
    line = str(problem).splitlines()[0] if str(problem) else repr(problem)
    return RecordsUnavailableError('%s %s: %s' % (what, safe_url(url), line),
                                   public='%s (%s): %s' % (what, kind_of(url), line))



def sqlite_connections(engine: Engine, *pragmas: str) -> None:
    """Each new SQLite connection of ``engine`` runs ``pragmas``; Kale says BEGIN itself."""
    @event.listens_for(engine, 'connect')
    def connect(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None
        for pragma in pragmas:
            dbapi_connection.execute('PRAGMA ' + pragma)


def _ping_when_idle(engine: Engine, clock: Callable[[], float],
                    idle_sec: float = PING_IDLE_SEC) -> None:
    """SQLAlchemy's ``pool_pre_ping`` for connections idle in the pool for
    ``idle_sec`` or more (or never used)."""
    dialect = engine.dialect

    @event.listens_for(engine, 'checkin')
    def checkin(dbapi_connection: Any, record: Any) -> None:
        record.info['kale_idle_since'] = clock()

    @event.listens_for(engine, 'checkout')
    def checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        since = record.info.get('kale_idle_since')
        if since is not None and clock() - since < idle_sec:
            return
        try:
            dialect.do_ping(dbapi_connection)
        except Exception as exc:        # the pool connects anew, or raises
            raise sqlalchemy.exc.DisconnectionError(str(exc)) from exc


def make_engine(url: str, setting: str = 'RECORDS_URL', pool_size: int = 2,
                clock: Callable[[], float] = time.monotonic) -> Engine:
    """An engine on ``url`` (``clock``: how long a pooled connection was idle);
    ImproperlyConfigured naming ``setting`` when the URL cannot be used."""
    try:
        target = engine_url(url)
        if target.get_backend_name() == 'sqlite':
            if cancels.signal_path(target):          # a database in a file
                files.prepare_database(str(target.database))
            engine = sqlalchemy.create_engine(target, connect_args={'check_same_thread': False})
            sqlite_connections(engine, 'busy_timeout = %d' % SQLITE_BUSY_TIMEOUT_MS,
                               'journal_mode = WAL', 'synchronous = NORMAL')
            return engine
        engine = sqlalchemy.create_engine(target, pool_size=pool_size, max_overflow=4)
        _ping_when_idle(engine, clock)
        return engine
    except (SQLAlchemyError, ImportError, ValueError) as exc:
        raise ImproperlyConfigured('%s %r cannot be used: %s' % (setting, safe_url(url), exc),
                                   public='%s (%s) cannot be used' % (setting, kind_of(url))
                                   ) from exc
