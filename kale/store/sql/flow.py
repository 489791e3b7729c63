"""The flow-control facet on a database (see :mod:`kale.store.flow`): each
step one statement, text built once; the locks and what an ask costs:
docs/explanation/internals-store.md, "Flow control"."""
from __future__ import annotations

import re
from typing import Any, Optional, Sequence

from sqlalchemy import bindparam, text
from sqlalchemy.sql.elements import TextClause

from kale.flow.bucket import Bucket
from kale.flow.spec import Rate
from kale.store.flow import Answer, Ask, decide
from kale.store.sql.records import OnStore


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
