"""The memory store's smaller facets: the schedules' lease and rows (see
:class:`kale.store.schedules.ScheduleStore`), unique keys
(:class:`kale.store.unique.UniqueStore`), webhooks
(:class:`kale.store.webhooks.WebhookStore`), controls
(:class:`kale.store.controls.ControlStore`), flow control
(:mod:`kale.store.flow`) and the outbox (:mod:`kale.store.outbox`), each
under the memory store's lock."""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import threading
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Optional, Sequence

from kale.exceptions import RecordsUnavailableError
from kale.flow.bucket import Bucket
from kale.flow.spec import Rate
from kale.statuses import FINAL_TASK
from kale.store.controls import PAUSE, STOP, ControlRows
from kale.store.flow import Answer, Ask, decide
from kale.store.outbox import OutboxRow
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



class MemoryFlow:
    """Leases, buckets and places in dictionaries, under the memory store's
    lock (one ask at a time: the lock is the transaction)."""

    def __init__(self, root: 'MemoryStore'):
        self.root = root
        #: (key, holder) -> (worker, expires_at)
        self.leases: dict[tuple[str, str], tuple[str, float]] = {}
        #: key -> (tokens, updated_at)
        self.buckets: dict[str, tuple[float, float]] = {}
        #: (key, task id) -> expires_at
        self.places: dict[tuple[str, str], float] = {}

    def ask(self, asks: Sequence[Ask], now: float, lease_sec: float) -> list[Answer]:
        with self.root.lock:
            return decide(self, asks, now, lease_sec)

    def renew(self, slots: Sequence[tuple[str, str]], now: float, lease_sec: float) -> int:
        renewed = 0
        with self.root.lock:
            for slot in set(self._matching(slots)):
                self.leases[slot] = (self.leases[slot][0], now + lease_sec)
                renewed += 1
            for slot, (_, expires_at) in list(self.leases.items()):
                if expires_at <= now - lease_sec:
                    del self.leases[slot]
        return renewed

    def holders(self, key: str, now: float) -> list[str]:
        with self.root.lock:
            return sorted(holder for (held_key, holder), (_, expires_at) in self.leases.items()
                          if held_key == key and expires_at > now)

    def give_back(self, slots: Sequence[tuple[str, str]]) -> None:
        with self.root.lock:
            for slot in list(self._matching(slots)):
                del self.leases[slot]

    def _matching(self, slots: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        """The leases whose key and holder are among the slots' (as SQL's ``IN`` matches them)."""
        keys = {key for key, _ in slots}
        holders = {holder for _, holder in slots}
        return [slot for slot in self.leases if slot[0] in keys and slot[1] in holders]

    # --- the steps of kale.store.flow.decide, under the lock --------------------------

    def lock_slots(self, key: str) -> None:
        """The store's lock is held already."""

    def count_others(self, key: str, holders: list[str], now: float) -> int:
        return sum(1 for (held_key, holder), (_, expires_at) in self.leases.items()
                   if held_key == key and expires_at > now and holder not in holders)

    def drop_expired(self, key: str, now: float) -> None:
        for slot, (_, expires_at) in list(self.leases.items()):
            if slot[0] == key and expires_at <= now:
                del self.leases[slot]

    def take_slots(self, key: str, taken: list[tuple[str, str]], expires_at: float) -> None:
        for holder, worker in taken:
            self.leases[(key, holder)] = (worker, expires_at)

    def read_bucket(self, key: str, rate: Rate, now: float) -> Bucket:
        tokens, updated_at = self.buckets.setdefault(key, (rate.capacity, now))
        reserved = sum(1 for (place_key, _), expires_at in self.places.items()
                       if place_key == key and expires_at > now)
        return Bucket(tokens, updated_at, reserved)

    def take_reserved(self, key: str, holders: list[str]) -> dict[str, float]:
        return {holder: self.places.pop((key, holder)) for holder in holders
                if (key, holder) in self.places}

    def write_bucket(self, key: str, bucket: Bucket) -> None:
        self.buckets[key] = (bucket.tokens, bucket.updated_at)

    def reserve(self, key: str, places: list[tuple[str, float]], now: float) -> None:
        for place, expires_at in list(self.places.items()):
            if place[0] == key and expires_at <= now:
                del self.places[place]
        for holder, expires_at in places:
            self.places[(key, holder)] = expires_at



class _Claim:
    def __init__(self, rows: list[OutboxRow]):
        self.rows = rows
        self.rejected: list[tuple[OutboxRow, str, float]] = []

    def set_aside(self, rejected: Sequence[tuple[OutboxRow, str]], now: float) -> None:
        self.rejected += [(row, reason[:500], now) for row, reason in rejected]


class MemoryOutbox:
    """Rows by id in insertion order, the rows set aside, the ids consumed; one
    claim at a time holds its rows. Both sides in one object, without
    transactions: a row written by :func:`kale.outbox.publish` given this
    object is there at once (a test publishes into it and runs a relay on it)."""

    concurrent = True

    def __init__(self, root: 'MemoryStore'):
        self.root = root
        self.rows: dict[int, OutboxRow] = {}
        #: (row, why, when), in the order they were set aside.
        self.rejected: list[tuple[OutboxRow, str, float]] = []
        self.consumed: dict[str, float] = {}
        self._claimed: set[int] = set()
        self._next_id = 1
        self._fifo_held = False

    def init(self) -> list[str]:
        return []

    def hold(self) -> None:
        """Any number of relays may share it."""

    def let_go(self) -> None:
        """Nothing was held."""

    @contextlib.contextmanager
    def claim(self, limit: int, fifo: bool) -> Iterator[_Claim]:
        with self.root.lock:
            rows, took_fifo = self._pick(limit, fifo)
            self._claimed.update(row.id for row in rows)
        claim, done = _Claim(rows), False
        try:
            yield claim
            done = True
        finally:
            with self.root.lock:        # a block that raised leaves every row in the outbox
                self._claimed.difference_update(row.id for row in rows)
                self._fifo_held = self._fifo_held and not took_fifo
                if done:
                    for row in rows:
                        self.rows.pop(row.id, None)
                    self.rejected += claim.rejected

    def _pick(self, limit: int, fifo: bool) -> tuple[list[OutboxRow], bool]:
        free = [row for row in self.rows.values() if row.id not in self._claimed]
        if not fifo:
            return free[:limit], False
        rows = [row for row in free if row.dedup_id is None][:limit]
        took_fifo = len(rows) < limit and not self._fifo_held
        if took_fifo:               # one claim at a time takes the FIFO rows, in order
            self._fifo_held = True
            rows += [row for row in free if row.dedup_id is not None][:limit - len(rows)]
        return sorted(rows, key=lambda row: row.id), took_fifo

    def pending(self, now: float) -> tuple[int, Optional[float]]:
        with self.root.lock:
            oldest = min((row.created_at for row in self.rows.values()), default=None)
            return len(self.rows), (now - oldest) if oldest is not None else None

    def purge_consumed(self, before: float) -> int:
        with self.root.lock:
            gone = [task_id for task_id, at in self.consumed.items() if at < before]
            for task_id in gone:
                del self.consumed[task_id]
            return len(gone)

    def listen(self, wake: threading.Event) -> None:
        return None

    # --- the publish side (kale.store.outbox.OutboxWriter) ---------------------------

    def insert(self, rows: Sequence[dict[str, Any]]) -> None:
        with self.root.lock:
            for row in rows:
                self.rows[self._next_id] = OutboxRow(id=self._next_id, **row)
                self._next_id += 1

    def consume(self, task_id: str, now: float) -> bool:
        with self.root.lock:
            if task_id in self.consumed:
                return False
            self.consumed[task_id] = now
            return True
