"""The smaller facets on a database (see :mod:`kale.store`): the schedules
(``kale_scheduler_lease``, ``kale_schedules``), unique keys (``kale_unique``),
webhooks (``kale_webhooks``), controls (``kale_controls``), and flow control
(see :mod:`kale.store.flow`), each of its steps one statement, text built once
(the locks and what an ask costs: docs/explanation/internals-store.md, "Flow control")."""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Optional, Sequence

from sqlalchemy import Connection, and_, bindparam, case, delete, exists, or_, select, text, update
from sqlalchemy.sql.elements import TextClause

from kale.flow.bucket import Bucket
from kale.flow.spec import Rate
from kale.statuses import FINAL_TASK
from kale.store.controls import PAUSE, STOP, ControlRows
from kale.store.flow import Answer, Ask, decide
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



def _sql(statement: str) -> TextClause:
    """A statement's text, a parameter after ``IN`` a list."""
    return text(statement).bindparams(*(bindparam(name, expanding=True)
                                        for name in re.findall(r'IN :(\w+)', statement)))


_LEASES = 'kale_concurrency_leases'
_BUCKETS = 'kale_rate_buckets'
_RESERVED = 'kale_rate_reservations'
_LOCK_KEY = _sql('SELECT pg_advisory_xact_lock(hashtext(:key))')
_COUNT_OTHERS = _sql('SELECT count(*) FROM %s WHERE key = :key AND expires_at > :now '
                     'AND holder NOT IN :holders' % _LEASES)
_DROP_EXPIRED = _sql('DELETE FROM %s WHERE key = :key AND expires_at <= :now' % _LEASES)
_TAKE_SLOT = _sql('INSERT INTO %s (key, holder, worker, expires_at) '
                  'VALUES (:key, :holder, :worker, :expires_at) ON CONFLICT (key, holder) '
                  'DO UPDATE SET expires_at = excluded.expires_at, worker = excluded.worker'
                  % _LEASES)
_GIVE_BACK = _sql('DELETE FROM %s WHERE key IN :keys AND holder IN :holders' % _LEASES)
_RENEW = _sql('UPDATE %s SET expires_at = :expires_at WHERE key IN :keys AND holder IN :holders'
              % _LEASES)
_DROP_DEAD = _sql('DELETE FROM %s WHERE expires_at <= :before' % _LEASES)
_HOLDERS = _sql('SELECT holder FROM %s WHERE key = :key AND expires_at > :now '
                'ORDER BY holder' % _LEASES)
_TAKE_RESERVED = _sql('DELETE FROM %s WHERE key = :key AND holder IN :holders '
                      'RETURNING holder, expires_at' % _RESERVED)
_READ_BUCKET = 'SELECT tokens, updated_at FROM %s WHERE key = :key' % _BUCKETS
_COUNT_RESERVED = 'SELECT count(*) FROM %s WHERE key = :key AND expires_at > :now' % _RESERVED
_NEW_BUCKET = _sql('INSERT INTO %s (key, tokens, updated_at) VALUES (:key, :tokens, :now) '
                   'ON CONFLICT (key) DO NOTHING' % _BUCKETS)
_WRITE_BUCKET = _sql('UPDATE %s SET tokens = :tokens, updated_at = :updated_at WHERE key = :key'
                     % _BUCKETS)
#: The same for psycopg itself, sent with the commit (see _Steps.commit).
_WRITE_BUCKET_PSYCOPG = ('UPDATE %s SET tokens = %%(tokens)s, updated_at = %%(updated_at)s '
                         'WHERE key = %%(key)s' % _BUCKETS)
_DROP_LAPSED = _sql('DELETE FROM %s WHERE key = :key AND expires_at <= :now' % _RESERVED)
_RESERVE = _sql('INSERT INTO %s (key, holder, expires_at) VALUES (:key, :holder, :expires_at) '
                'ON CONFLICT (key, holder) DO UPDATE SET expires_at = excluded.expires_at'
                % _RESERVED)
# SQLite reads the bucket and counts its places in one statement (BEGIN
# IMMEDIATE holds every writer off); PostgreSQL counts after the row's lock
# is held, in a statement of its own, whose snapshot sees what the
# transaction it waited for committed.
_READ_BUCKET_SQLITE = _sql('SELECT tokens, updated_at, (%s) FROM %s WHERE key = :key'
                           % (_COUNT_RESERVED, _BUCKETS))
_READ_BUCKET_POSTGRES = _sql(_READ_BUCKET + ' FOR UPDATE')
_COUNT_RESERVED_POSTGRES = _sql(_COUNT_RESERVED)


class SQLFlow(OnStore):
    """Buckets and leases in ``kale_rate_buckets``, ``kale_rate_reservations``
    and ``kale_concurrency_leases`` (see :class:`kale.store.flow.FlowStore`)."""

    def ask(self, asks: Sequence[Ask], now: float, lease_sec: float) -> list[Answer]:
        with self.store.begin(write=True) as conn:
            steps = _Steps(conn)
            answers = decide(steps, asks, now, lease_sec)
            steps.commit()
            return answers

    def give_back(self, slots: Sequence[tuple[str, str]]) -> None:
        if not slots:
            return
        with self.store.begin(write=True) as conn:
            _Steps(conn).give_back(slots)

    def renew(self, slots: Sequence[tuple[str, str]], now: float, lease_sec: float) -> int:
        if not slots:
            return 0
        with self.store.begin(write=True) as conn:
            renewed = int(conn.execute(_RENEW, {
                'keys': sorted({key for key, _ in slots}),
                'holders': sorted({holder for _, holder in slots}),
                'expires_at': now + lease_sec}).rowcount)
            conn.execute(_DROP_DEAD, {'before': now - lease_sec})
        return renewed

    def holders(self, key: str, now: float) -> list[str]:
        return [row[0] for row in self.store.read(_HOLDERS.bindparams(key=key, now=now))]


class _Steps:
    """:class:`kale.store.flow.FlowSteps` as statements on one connection."""

    def __init__(self, conn: Any):
        self.conn = conn
        self.postgres = conn.dialect.name == 'postgresql'
        #: PostgreSQL: the buckets' writes, sent with the commit. Nothing
        #: later in an ask reads a bucket it wrote, and its row is locked
        #: since it was read.
        self._bucket_writes: list[dict[str, Any]] = []

    def lock_slots(self, key: str) -> None:
        if self.postgres:
            self.conn.execute(_LOCK_KEY, {'key': 'kale.flow:' + key})

    def count_others(self, key: str, holders: list[str], now: float) -> int:
        return int(self.conn.execute(_COUNT_OTHERS, {'key': key, 'now': now,
                                                     'holders': holders}).scalar() or 0)

    def drop_expired(self, key: str, now: float) -> None:
        self.conn.execute(_DROP_EXPIRED, {'key': key, 'now': now})

    def take_slots(self, key: str, taken: list[tuple[str, str]], expires_at: float) -> None:
        self.conn.execute(_TAKE_SLOT, [{'key': key, 'holder': holder, 'worker': worker,
                                        'expires_at': expires_at} for holder, worker in taken])

    def read_bucket(self, key: str, rate: Rate, now: float) -> Bucket:
        # The bucket's row first: on PostgreSQL its lock keeps the key's
        # reservations to this transaction.
        read = _READ_BUCKET_POSTGRES if self.postgres else _READ_BUCKET_SQLITE
        row = self.conn.execute(read, {'key': key, 'now': now}).first()
        if row is None:                 # a new key: a full bucket
            self.conn.execute(_NEW_BUCKET, {'key': key, 'tokens': rate.capacity, 'now': now})
            row = self.conn.execute(read, {'key': key, 'now': now}).one()
        reserved: Optional[int]
        if self.postgres:
            reserved = self.conn.execute(_COUNT_RESERVED_POSTGRES,
                                         {'key': key, 'now': now}).scalar()
        else:
            reserved = row[2]
        return Bucket(row[0], row[1], int(reserved or 0))

    def take_reserved(self, key: str, holders: list[str]) -> dict[str, float]:
        return {row[0]: row[1] for row in self.conn.execute(
            _TAKE_RESERVED, {'key': key, 'holders': holders})}

    def write_bucket(self, key: str, bucket: Bucket) -> None:
        values = {'key': key, 'tokens': bucket.tokens, 'updated_at': bucket.updated_at}
        if self.postgres:
            self._bucket_writes.append(values)
        else:
            self.conn.execute(_WRITE_BUCKET, values)

    def commit(self) -> None:
        """The buckets' writes, and on psycopg the commit with them, in one round
        trip (pipeline mode): every other worker's ask on a bucket's key waits for
        its row from its read to the commit. The store's own commit then has nothing
        left to send."""
        writes, self._bucket_writes = self._bucket_writes, []
        if not writes:
            return
        driver = self.conn.connection.driver_connection
        if not hasattr(driver, 'pipeline'):        # not psycopg 3
            for values in writes:
                self.conn.execute(_WRITE_BUCKET, values)
            return
        with driver.pipeline():
            for values in writes:
                driver.execute(_WRITE_BUCKET_PSYCOPG, values)
            driver.commit()

    def reserve(self, key: str, places: list[tuple[str, float]], now: float) -> None:
        self.conn.execute(_DROP_LAPSED, {'key': key, 'now': now})
        self.conn.execute(_RESERVE, [{'key': key, 'holder': holder, 'expires_at': expires_at}
                                     for holder, expires_at in places])

    def give_back(self, slots: Sequence[tuple[str, str]]) -> None:
        self.conn.execute(_GIVE_BACK, {'keys': sorted({key for key, _ in slots}),
                                       'holders': sorted({holder for _, holder in slots})})
