"""The schedules facet in memory (see :class:`kale.store.schedules.ScheduleStore`)."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Iterable, Optional

from kale.store.schedules import Lease, Progress

if TYPE_CHECKING:
    from kale.store.memory import MemoryStore


class MemorySchedules:
    """The lease and the schedules' rows, under the memory store's lock."""

    def __init__(self, root: 'MemoryStore'):
        self.root = root
        self._lease: Optional[Lease] = None
        self._rows: dict[str, Progress] = {}

    def acquire(self, holder: str, now: float, length_sec: float) -> tuple[bool, Optional[Lease]]:
        with self.root.lock:
            lease = self._lease or Lease('', 0.0, 0.0)
            if lease.holder != holder and lease.expires_at > now:
                self._lease = lease
                return False, lease
            acquired = lease.acquired_at if lease.held_by(holder, now) else now
            self._lease = Lease(holder, acquired, now + length_sec)
            return True, self._lease

    def release(self, holder: str, now: float) -> None:
        with self.root.lock:
            if self._lease is not None and self._lease.holder == holder:
                self._lease = dataclasses.replace(self._lease, expires_at=now)

    def lease(self) -> Optional[Lease]:
        with self.root.lock:
            return self._lease if self._lease is not None and self._lease.holder else None

    def progress(self, names: Optional[Iterable[str]] = None) -> dict[str, Progress]:
        with self.root.lock:
            wanted = set(names) if names is not None else None
            return {name: row for name, row in self._rows.items()
                    if wanted is None or name in wanted}

    def start(self, rows: Iterable[tuple[str, str]], now: float) -> None:
        with self.root.lock:
            for name, _task in rows:
                self._rows.setdefault(name, Progress(name, now))

    def _leads(self, holder: str, now: float) -> bool:
        return self._lease is not None and self._lease.held_by(holder, now)

    def claim(self, name: str, holder: str, tick: float, task_id: str, now: float) -> bool:
        with self.root.lock:
            row = self._rows.get(name)
            if row is None or row.watermark >= tick or not self._leads(holder, now):
                return False
            self._rows[name] = Progress(name, tick, tick, task_id, now)
            return True

    def unclaim(self, before: Progress, tick: float, task_id: str) -> None:
        with self.root.lock:
            row = self._rows.get(before.name)
            if row is not None and row.watermark == tick and row.last_task_id == task_id:
                self._rows[before.name] = before

    def skip(self, name: str, holder: str, up_to: float, now: float) -> bool:
        with self.root.lock:
            row = self._rows.get(name)
            if row is None or row.watermark >= up_to or not self._leads(holder, now):
                return False
            self._rows[name] = dataclasses.replace(row, watermark=up_to)
            return True

    def task_statuses(self, task_ids: Iterable[str]) -> dict[str, str]:
        with self.root.lock:
            found = {task_id: self.root.status_of(task_id) for task_id in task_ids if task_id}
            return {task_id: status for task_id, status in found.items() if status is not None}
