"""The facets on a small table each (see :mod:`kale.store`): unique keys
(``kale_unique``), webhooks (``kale_webhooks``) and controls (``kale_controls``)."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from sqlalchemy import Connection, and_, delete, or_, select, update

from kale.statuses import FINAL_TASK
from kale.store.controls import PAUSE, STOP, ControlRows
from kale.store.sql.driver import insert_for
from kale.store.sql.records import OnStore
from kale.store.sql.schema import controls, tasks, unique_keys, webhooks
from kale.store.unique import claim_each


class SQLUnique(OnStore):
    """Unique keys in ``kale_unique`` (see :class:`kale.store.unique.UniqueStore`),
    claimed with a conditional insert or update."""

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
        if held.expires_at > now and status not in FINAL_TASK:
            return str(held.task_id)
        moved = conn.execute(update(unique_keys).where(
            unique_keys.c.key == key, unique_keys.c.task_id == held.task_id).values(
            task_id=task_id, expires_at=now + for_sec).returning(unique_keys.c.task_id)).first()
        if moved is not None:
            return task_id
    return task_id


_WEBHOOKS = select(webhooks).order_by(webhooks.c.created_at, webhooks.c.id)


class SQLWebhooks(OnStore):
    """Webhooks' rows in ``kale_webhooks``."""

    def add(self, row: Mapping[str, Any]) -> None:
        self.store.changed(webhooks.insert().values(**row))

    def rows(self, topic: Optional[str] = None, active_only: bool = False) -> list[dict[str, Any]]:
        query = _WEBHOOKS
        if topic is not None:
            query = query.where(webhooks.c.topic == topic)
        if active_only:
            query = query.where(webhooks.c.active == 1)
        return [dict(row._mapping) for row in self.store.read(query)]

    def row(self, webhook_id: str) -> Optional[dict[str, Any]]:
        found = self.store.read(select(webhooks).where(webhooks.c.id == webhook_id))
        return dict(found[0]._mapping) if found else None

    def set_active(self, webhook_id: str, active: bool, mac: str, updated_at: float) -> bool:
        return bool(self.store.changed(update(webhooks).where(webhooks.c.id == webhook_id).values(
            active=1 if active else 0, mac=mac, updated_at=updated_at)))

    def remove(self, webhook_id: str) -> bool:
        return bool(self.store.changed(delete(webhooks).where(webhooks.c.id == webhook_id)))


class SQLControls(ControlRows, OnStore):
    """Rows of ``kale_controls``: (kind, name) -> requested_at."""

    def _add(self, kind: str, name: str, now: float) -> float:
        with self.store.begin(write=True) as conn:
            insert = insert_for(conn.dialect.name)
            conn.execute(insert(controls).values(kind=kind, name=name, requested_at=now)
                         .on_conflict_do_nothing(index_elements=[controls.c.kind, controls.c.name]))
            return float(conn.execute(select(controls.c.requested_at).where(
                controls.c.kind == kind, controls.c.name == name)).scalar_one())

    def _of(self, kind: str) -> dict[str, float]:
        return {name: at for name, at in self.store.read(
            select(controls.c.name, controls.c.requested_at).where(controls.c.kind == kind))}

    def _remove(self, kind: str, name: str) -> bool:
        return bool(self.store.changed(delete(controls).where(
            controls.c.kind == kind, controls.c.name == name)))

    def read(self, worker_id: str) -> tuple[Optional[float], list[str]]:
        stop_at, paused = None, []
        with self.store.begin() as conn:
            for kind, name, at in conn.execute(select(
                    controls.c.kind, controls.c.name, controls.c.requested_at).where(or_(
                    controls.c.kind == PAUSE, and_(controls.c.kind == STOP,
                                                controls.c.name == worker_id)))):
                if kind == STOP:
                    stop_at = float(at)
                else:
                    paused.append(name)
        return stop_at, sorted(paused)
