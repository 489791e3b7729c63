"""The memory store's smaller facets: the schedules' lease and rows (see
:class:`kale.store.schedules.ScheduleStore`), unique keys
(:class:`kale.store.unique.UniqueStore`), webhooks
(:class:`kale.store.webhooks.WebhookStore`) and controls
(:class:`kale.store.controls.ControlStore`), each under the memory store's lock."""
from __future__ import annotations

import copy
import dataclasses
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence

from kale.exceptions import RecordsUnavailableError
from kale.statuses import FINAL_TASK
from kale.store.controls import PAUSE, STOP, ControlRows
from kale.store.schedules import Lease, Progress
from kale.store.unique import claim_each
from kale.store.webhooks import COLUMNS

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

    def claim(self, name: str, holder: str, tick: float, task_id: str, now: float) -> bool:
        return self._move(name, holder, tick, now, last_tick=tick, last_task_id=task_id,
                          last_published_at=now)

    def _move(self, name: str, holder: str, to: float, now: float, **values: Any) -> bool:
        """Move a schedule's watermark up to ``to``, only while ``holder`` leads."""
        with self.root.lock:
            row = self._rows.get(name)
            if row is None or row.watermark >= to or self._lease is None \
                    or not self._lease.held_by(holder, now):
                return False
            self._rows[name] = dataclasses.replace(row, watermark=to, **values)
            return True

    def unclaim(self, before: Progress, tick: float, task_id: str) -> None:
        with self.root.lock:
            row = self._rows.get(before.name)
            if row is not None and row.watermark == tick and row.last_task_id == task_id:
                self._rows[before.name] = before

    def skip(self, name: str, holder: str, up_to: float, now: float) -> bool:
        return self._move(name, holder, up_to, now)

    def task_statuses(self, task_ids: Iterable[str]) -> dict[str, str]:
        with self.root.lock:
            found = {task_id: self.root.status_of(task_id) for task_id in task_ids if task_id}
            return {task_id: status for task_id, status in found.items() if status is not None}


class MemoryUnique:
    """Each key's holder and until when, under the memory store's lock."""

    def __init__(self, root: 'MemoryStore'):
        self.root = root
        self.keys: dict[str, tuple[str, float]] = {}

    def claim(self, claims: Sequence[tuple[str, str]], now: float, for_sec: float) -> list[str]:
        with self.root.lock:
            return claim_each(claims, lambda key, task_id: self._claim(key, task_id, now, for_sec))

    def _claim(self, key: str, task_id: str, now: float, for_sec: float) -> str:
        held = self.keys.get(key)
        if held is not None and held[1] > now and \
                self.root.status_of(held[0]) not in FINAL_TASK:
            return held[0]
        self.keys[key] = (task_id, now + for_sec)
        return task_id

    def release(self, claims: Sequence[tuple[str, str]]) -> None:
        with self.root.lock:
            for key, task_id in claims:
                if self.keys.get(key, ('',))[0] == task_id:
                    del self.keys[key]


class MemoryWebhooks:
    """Webhooks' rows by id, under the memory store's lock (copies go in and out)."""

    def __init__(self, root: 'MemoryStore'):
        self.root = root
        self.by_id: dict[str, dict[str, Any]] = {}

    def add(self, row: Mapping[str, Any]) -> None:
        with self.root.lock:
            if row['id'] in self.by_id:
                raise RecordsUnavailableError('memory store: webhook %s exists' % row['id'])
            self.by_id[row['id']] = {name: copy.deepcopy(row.get(name)) for name in COLUMNS}

    def rows(self, topic: Optional[str] = None, active_only: bool = False) -> list[dict[str, Any]]:
        with self.root.lock:
            rows = [copy.deepcopy(row) for row in self.by_id.values()
                    if (topic is None or row['topic'] == topic)
                    and (not active_only or row['active'] == 1)]
        return sorted(rows, key=lambda row: (row['created_at'], row['id']))

    def row(self, webhook_id: str) -> Optional[dict[str, Any]]:
        with self.root.lock:
            found = self.by_id.get(webhook_id)
            return copy.deepcopy(found) if found is not None else None

    def set_active(self, webhook_id: str, active: bool, mac: str, updated_at: float) -> bool:
        with self.root.lock:
            row = self.by_id.get(webhook_id)
            if row is None:
                return False
            row.update(active=1 if active else 0, mac=mac, updated_at=updated_at)
            return True

    def remove(self, webhook_id: str) -> bool:
        with self.root.lock:
            return self.by_id.pop(webhook_id, None) is not None


class MemoryControls(ControlRows):
    """Each control's time by (kind, name), under the memory store's lock."""

    def __init__(self, root: 'MemoryStore'):
        self.root = root
        self.rows: dict[tuple[str, str], float] = {}

    def _add(self, kind: str, name: str, now: float) -> float:
        with self.root.lock:
            return self.rows.setdefault((kind, name), now)

    def _of(self, kind: str) -> dict[str, float]:
        with self.root.lock:
            return {name: at for (found, name), at in self.rows.items() if found == kind}

    def _remove(self, kind: str, name: str) -> bool:
        with self.root.lock:
            return self.rows.pop((kind, name), None) is not None

    def read(self, worker_id: str) -> tuple[Optional[float], list[str]]:
        with self.root.lock:
            return self.rows.get((STOP, worker_id)), sorted(self._of(PAUSE))
