"""The schedules facet on a database (see :class:`kale.store.schedules.ScheduleStore`)."""
from __future__ import annotations

from typing import Any, Iterable, Optional

from sqlalchemy import and_, case, exists, or_, select, update

from kale.store.schedules import LEASE, Lease, Progress
from kale.store.sql.driver import insert_for
from kale.store.sql.records import OnStore
from kale.store.sql.schema import scheduler_lease, schedules, tasks

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
