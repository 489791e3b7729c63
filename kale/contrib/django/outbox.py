"""The outbox on Django's own connection.

``publish(MyTask, app_data, *args, **kwargs)`` is :func:`kale.outbox.publish`
on the connection of Django database ``using`` (default: 'default'): the
same checks and exceptions, the signed message written into ``kale_outbox``
in Django's current transaction (``transaction.atomic()``; outside one, it
commits at once), and nothing at all if that rolls back. ``manage.py
migrate`` creates the tables (the app's migrations), and ``manage.py kale
relay`` sends what committed. SQLite and PostgreSQL.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional

from kale import outbox
from kale.app import App
from kale.exceptions import OutboxError
from kale.store.sql.outbox import CursorOutboxWriter

#: What to do when the tables are missing.
HINT = 'run `manage.py migrate` on this database first, with kale.contrib.django installed?'


def writer(using: Optional[str] = None) -> CursorOutboxWriter:
    """The outbox writer on Django database ``using``'s connection, in its
    current transaction."""
    from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
    connection = connections[using or DEFAULT_DB_ALIAS]
    if connection.vendor not in ('sqlite', 'postgresql'):
        raise OutboxError('outbox: Kale\'s outbox works on SQLite and PostgreSQL, not on '
                          'Django database %r (%s)' % (using or DEFAULT_DB_ALIAS,
                                                        connection.vendor))
    return CursorOutboxWriter(connection.cursor, (DatabaseError,), HINT)


def publish(task: Any, app_data: Any, *args: Any, using: Optional[str] = None,
            delay_sec: float = 0, group_id: Optional[str] = None,
            dedup_id: Optional[str] = None, labels: Optional[Mapping[str, str]] = None,
            unique_for_sec: Optional[float] = None, eta: Any = None,
            app: Optional[App] = None, **kwargs: Any) -> str:
    """Publish one run of ``task`` when Django's transaction on ``using``
    commits (see the module docstring); returns its task id."""
    return outbox.publish(writer(using), task, app_data, *args, delay_sec=delay_sec,
                          group_id=group_id, dedup_id=dedup_id, labels=labels,
                          unique_for_sec=unique_for_sec, eta=eta, app=app, **kwargs)


def publish_batch(task: Any, app_data: Any, calls: Iterable[Any], using: Optional[str] = None,
                  delay_sec: float = 0, group_id: Optional[str] = None,
                  labels: Optional[Mapping[str, str]] = None,
                  unique_for_sec: Optional[float] = None, eta: Any = None,
                  app: Optional[App] = None) -> list[str]:
    """Publish many runs when Django's transaction on ``using`` commits."""
    return outbox.publish_batch(writer(using), task, app_data, calls, delay_sec=delay_sec,
                                group_id=group_id, labels=labels,
                                unique_for_sec=unique_for_sec, eta=eta, app=app)


def consume_once(task_id: str, using: Optional[str] = None) -> bool:
    """:func:`kale.outbox.consume_once` in Django's transaction on ``using``:
    True the first time ``task_id`` is consumed, False when it already was."""
    return outbox.consume_once(writer(using), task_id)
