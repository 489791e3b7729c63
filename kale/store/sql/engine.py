"""The engine on a database: SQLite in WAL mode (Kale says BEGIN itself),
or PostgreSQL through psycopg, its pooled connections pinged only after
:data:`PING_IDLE_SEC` idle (docs/explanation/internals-store.md, "The engine")."""
from __future__ import annotations

import time
from typing import Any, Callable

import sqlalchemy
from sqlalchemy import Engine, event
from sqlalchemy.exc import SQLAlchemyError

from kale.exceptions import ImproperlyConfigured
from kale.store import files
from kale.store.sql import cancels
from kale.store.sql.urls import engine_url, kind_of, safe_url

#: Seconds a SQLite writer waits for another process's write transaction.
SQLITE_BUSY_TIMEOUT_MS = 10000
#: A pooled PostgreSQL connection idle for longer is pinged before it is used.
PING_IDLE_SEC = 1.0


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
