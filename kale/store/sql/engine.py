"""The engine on a database: SQLite in WAL mode (Kale says BEGIN itself),
or PostgreSQL through psycopg."""
from __future__ import annotations

from typing import Any

import sqlalchemy
from sqlalchemy import Engine, event
from sqlalchemy.exc import SQLAlchemyError

from kale.exceptions import ImproperlyConfigured
from kale.store import files
from kale.store.sql import cancels
from kale.store.sql.urls import engine_url, safe_url

#: Seconds a SQLite writer waits for another process's write transaction.
SQLITE_BUSY_TIMEOUT_MS = 10000


def _sqlite_connection_setup(engine: Engine) -> None:
    @event.listens_for(engine, 'connect')
    def connect(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None       # Kale says BEGIN itself
        cursor = dbapi_connection.cursor()
        cursor.execute('PRAGMA busy_timeout = %d' % SQLITE_BUSY_TIMEOUT_MS)
        cursor.execute('PRAGMA journal_mode = WAL')
        cursor.execute('PRAGMA synchronous = NORMAL')
        cursor.close()


def make_engine(url: str, setting: str = 'RECORDS_URL', pool_size: int = 2) -> Engine:
    """An engine on ``url``: SQLite in WAL mode (Kale says BEGIN itself), or
    PostgreSQL through psycopg. ImproperlyConfigured naming ``setting`` when
    the URL cannot be used."""
    try:
        target = engine_url(url)
        if target.get_backend_name() == 'sqlite':
            if cancels.signal_path(target):          # a database in a file
                files.prepare_database(str(target.database))
            engine = sqlalchemy.create_engine(target, connect_args={'check_same_thread': False})
            _sqlite_connection_setup(engine)
            return engine
        return sqlalchemy.create_engine(target, pool_pre_ping=True, pool_size=pool_size,
                                        max_overflow=4)
    except (SQLAlchemyError, ImportError, ValueError) as exc:
        raise ImproperlyConfigured('%s %r cannot be used: %s'
                                   % (setting, safe_url(url), exc)) from exc
