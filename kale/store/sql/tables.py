"""The facets on a small table or two each (see :mod:`kale.store`): the
schedules (``kale_scheduler_lease``, ``kale_schedules``), unique keys
(``kale_unique``), webhooks (``kale_webhooks``) and controls (``kale_controls``)."""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional, Sequence

from sqlalchemy import Connection, and_, case, delete, exists, or_, select, update

from kale.statuses import FINAL_TASK
from kale.store.controls import PAUSE, STOP, ControlRows
from kale.store.schedules import LEASE, Lease, Progress
from kale.store.sql.driver import insert_for
from kale.store.sql.records import OnStore
from kale.store.sql.schema import controls, scheduler_lease, schedules, tasks, unique_keys, webhooks
from kale.store.unique import claim_each

#: The lease's row as a Lease's fields.
_LEASE = select(scheduler_lease.c.holder, scheduler_lease.c.acquired_at,
                scheduler_lease.c.expires_at).where(scheduler_lease.c.name == LEASE)


class SQLSchedules(OnStore):
    """``kale_scheduler_lease``'s row, taken and renewed by one conditional UPDATE,
    and ``kale_schedules``, whose watermark moves by one that checks the lease."""

    def acquire(self, holder: str, now: float, length_sec: float) -> tuple[bool, Optional[Lease]]:
        lease = scheduler_lease.c
        with self.store.begin(write=True) as conn:
            conn.execute(insert_for(self.store.dialect)(scheduler_lease).values(
                name=LEASE, holder='', acquired_at=0.0, expires_at=0.0).on_conflict_do_nothing(
                index_elements=[lease.name]))
            taken = conn.execute(update(scheduler_lease).where(
                lease.name == LEASE, or_(lease.holder == holder, lease.expires_at <= now)).values(
                holder=holder, expires_at=now + length_sec,
                acquired_at=case((and_(lease.holder == holder, lease.expires_at > now),
                                  lease.acquired_at), else_=now))).rowcount
            row = conn.execute(_LEASE).first()
        return taken == 1, Lease(*row) if row is not None else None

    def release(self, holder: str, now: float) -> None:
        self.store.changed(update(scheduler_lease).where(
            scheduler_lease.c.name == LEASE, scheduler_lease.c.holder == holder).values(
            expires_at=now))

    def lease(self) -> Optional[Lease]:
        found = self.store.read(_LEASE)
        return Lease(*found[0]) if found and found[0].holder else None

    def progress(self, names: Optional[Iterable[str]] = None) -> dict[str, Progress]:
        query = select(schedules.c.name, schedules.c.watermark, schedules.c.last_tick,
                       schedules.c.last_task_id, schedules.c.last_published_at)
        if names is not None:
            query = query.where(schedules.c.name.in_(list(names)))
        return {row.name: Progress(*row) for row in self.store.read(query)}

    def start(self, rows: Iterable[tuple[str, str]], now: float) -> None:
        """A schedule starts with its next tick, nothing to catch up."""
        values = [{'name': name, 'task': task[:255], 'watermark': now} for name, task in rows]
        if values:
            insert = insert_for(self.store.dialect)(schedules)
            with self.store.begin(write=True) as conn:
                for row in values:
                    conn.execute(insert.values(**row).on_conflict_do_nothing(
                        index_elements=[schedules.c.name]))

    def claim(self, name: str, holder: str, tick: float, task_id: str, now: float) -> bool:
        return self._move(name, holder, tick, now, last_tick=tick, last_task_id=task_id,
                          last_published_at=now)

    def _move(self, name: str, holder: str, to: float, now: float, **values: Any) -> bool:
        """Move a schedule's watermark up to ``to``, only while ``holder`` leads."""
        mine = exists().where(scheduler_lease.c.name == LEASE, scheduler_lease.c.holder == holder,
                              scheduler_lease.c.expires_at > now)
        return self.store.changed(update(schedules).where(
            schedules.c.name == name, schedules.c.watermark < to, mine).values(
            watermark=to, **values)) == 1

    def unclaim(self, before: Progress, tick: float, task_id: str) -> None:
        self.store.changed(update(schedules).where(
            schedules.c.name == before.name, schedules.c.watermark == tick,
            schedules.c.last_task_id == task_id).values(
            watermark=before.watermark, last_tick=before.last_tick,
            last_task_id=before.last_task_id, last_published_at=before.last_published_at))

    def skip(self, name: str, holder: str, up_to: float, now: float) -> bool:
        return self._move(name, holder, up_to, now)

    def task_statuses(self, task_ids: Iterable[str]) -> dict[str, str]:
        ids = [task_id for task_id in task_ids if task_id]
        if not ids:
            return {}
        return dict(self.store.read(select(tasks.c.id, tasks.c.status).where(tasks.c.id.in_(ids))))


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
