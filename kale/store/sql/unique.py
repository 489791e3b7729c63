"""The unique keys' facet on a database (see :class:`kale.store.unique.UniqueStore`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from sqlalchemy import Connection, select, update

from kale.store.sql.driver import insert_for
from kale.store.sql.schema import FINAL, tasks, unique_keys
from kale.store.unique import claim_each

if TYPE_CHECKING:
    from kale.store.sql.records import RecordStore


class SQLUnique:
    """Unique keys in ``kale_unique`` (see :class:`kale.store.unique.UniqueStore`),
    claimed with a conditional insert or update."""

    def __init__(self, store: 'RecordStore'):
        self.store = store

    def claim(self, claims: Sequence[tuple[str, str]], now: float, for_sec: float) -> list[str]:
        with self.store.begin(write=True) as conn:
            return claim_each(claims, lambda key, task_id: _claim_key(conn, key, task_id, now,
                                                                      for_sec))

    def release(self, claims: Sequence[tuple[str, str]]) -> None:
        with self.store.begin(write=True) as conn:
            for key, task_id in claims:
                conn.execute(unique_keys.delete().where(unique_keys.c.key == key,
                                                        unique_keys.c.task_id == task_id))


def _claim_key(conn: Connection, key: str, task_id: str, now: float, for_sec: float) -> str:
    insert = insert_for(conn.dialect.name)
    for _ in range(3):
        claimed = conn.execute(insert(unique_keys).values(
            key=key, task_id=task_id, expires_at=now + for_sec).on_conflict_do_nothing(
            index_elements=[unique_keys.c.key]).returning(unique_keys.c.task_id)).first()
        if claimed is not None:
            return task_id
        held = conn.execute(select(unique_keys.c.task_id, unique_keys.c.expires_at).where(
            unique_keys.c.key == key)).first()
        if held is None:                         # freed meanwhile: claim it again
            continue
        status = conn.execute(select(tasks.c.status).where(tasks.c.id == held.task_id)).scalar()
        if held.expires_at > now and status not in FINAL:
            return str(held.task_id)
        moved = conn.execute(update(unique_keys).where(
            unique_keys.c.key == key, unique_keys.c.task_id == held.task_id).values(
            task_id=task_id, expires_at=now + for_sec).returning(unique_keys.c.task_id)).first()
        if moved is not None:
            return task_id
    return task_id
