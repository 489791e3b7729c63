"""A record's ``retried_as``, claimed once (see :mod:`kale.records.retries`):
a conditional update only one caller can win."""
from __future__ import annotations

from typing import Optional

from sqlalchemy import select

from kale.store.sql.records import RecordStore
from kale.store.sql.schema import tasks


def claim(store: RecordStore, task_id: str, marker: str) -> bool:
    """Set the record's ``retried_as`` to ``marker`` if it has none: whether this call did."""
    with store.begin(write=True) as conn:
        return bool(conn.execute(tasks.update().where(
            tasks.c.id == task_id, tasks.c.retried_as.is_(None)).values(
            retried_as=marker)).rowcount)


def replace(store: RecordStore, task_id: str, marker: str, value: Optional[str]) -> None:
    """Set ``retried_as`` to ``value`` if it is still ``marker``."""
    with store.begin(write=True) as conn:
        conn.execute(tasks.update().where(tasks.c.id == task_id,
                                          tasks.c.retried_as == marker).values(retried_as=value))


def retried_as(store: RecordStore, task_id: str) -> Optional[str]:
    """The record's ``retried_as`` (None when it has none, or no record)."""
    with store.begin() as conn:
        found = conn.execute(select(tasks.c.retried_as).where(tasks.c.id == task_id)).scalar()
    return str(found) if found is not None else None
