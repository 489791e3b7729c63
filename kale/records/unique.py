"""Who holds each unique task's key, in the task records (``kale_unique``).

A key is held while its task's record is not final (or not written yet) and
younger than the task's ``unique_for_sec``; a publish claims free keys with a
conditional insert or update, so two publishers racing get one holder.
"""
from __future__ import annotations

from typing import Any, Sequence

from sqlalchemy import Connection, select, update

from kale.records.driver import insert_for
from kale.records.schema import FINAL, tasks, unique_keys


def claim_unique(store: Any, claims: Sequence[tuple[str, str]], now: float,
                 for_sec: float) -> list[str]:
    """For each (key, task id): the task id that holds the key, this one
    if it is free."""
    holders: list[str] = []
    with store.begin(write=True) as conn:
        taken: dict[str, str] = {}
        for key, task_id in claims:
            if key in taken:                     # twice in one batch: the first holds
                holders.append(taken[key])
                continue
            holder = _claim_key(conn, key, task_id, now, for_sec)
            taken[key] = holder
            holders.append(holder)
    return holders


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


def release_unique(store: Any, claims: Sequence[tuple[str, str]]) -> None:
    """Free keys claimed for tasks whose send then failed."""
    with store.begin(write=True) as conn:
        for key, task_id in claims:
            conn.execute(unique_keys.delete().where(unique_keys.c.key == key,
                                                    unique_keys.c.task_id == task_id))
