"""The buckets and leases of flow control, in their database.

The database is RATE_LIMIT_URL's, else the task records' (RECORDS_URL), with
the records' schema. A worker asks once per batch (:meth:`FlowState.ask`):
one short write transaction for all the batch's limited messages. On
SQLite, BEGIN IMMEDIATE serializes the writers. On PostgreSQL a concurrency
key's leases are counted under a transaction-scoped advisory lock on the
key, and a rate key's bucket row is locked (read FOR UPDATE, inserted first
when new) before its reservations are touched; the leases' keys are taken
first, then the buckets', each in order, so two workers never wait on each
other in a circle. Times are epoch seconds from the callers' clocks, so the
workers' clocks must agree to well under a second.

The statements are text built once (SQLAlchemy's constructs cost more to
execute than these statements take in SQLite). Costs, in that one
transaction: per concurrency key a COUNT of the others' live leases and one
INSERT of the slots taken (and, when the key is at its limit, a DELETE of
its expired leases); per rate key a SELECT of the bucket with the count of
its live reservations (on PostgreSQL, a COUNT after it; an INSERT first
for a new one), a DELETE of the
batch's reservations (RETURNING: a reserved run takes its token ahead of
the new ones), an UPDATE, and for refused runs a DELETE of the key's lapsed
reservations and an INSERT of theirs. Giving back a batch's slots is one
DELETE; a worker's renewal one UPDATE for the leases it holds, and one
DELETE of the leases of any key expired for longer than a lease.

A reservation is a place in line (:mod:`kale.flow.bucket`): every run that
starts takes a real token when it starts, so a reserved run that arrives
late (a backlog received slowly, a copy a killed worker held until its
visibility timeout) never starts beside the fresh tokens of its arrival.
A place not used within RESERVATION_GRACE_SEC of its time lapses.

A lease's holder is ``<worker>/<message id>``: one message holds at most one
slot (its class has one concurrency key), so a holder names one lease, and
the statements that end or renew several match ``key IN (...) AND holder IN
(...)``.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Optional, Sequence

from sqlalchemy import bindparam, text
from sqlalchemy.sql.elements import TextClause

from kale.flow.bucket import Bucket
from kale.flow.spec import Rate
from kale.records.store import RecordStore

#: Seconds a place reserved for a refused run is kept after the run was told
#: to come back; one not used by then lapses (the run, if it comes, asks again).
RESERVATION_GRACE_SEC = 60.0


@dataclasses.dataclass
class Ask:
    """What one run needs: a token of ``rate_key`` (when ``rate``), a slot of
    ``slot_key`` (when ``limit``), held by ``holder`` of ``worker``."""

    task_id: str
    rate: Optional[Rate] = None
    rate_key: str = ''
    limit: Optional[int] = None
    slot_key: str = ''
    holder: str = ''
    worker: str = ''


@dataclasses.dataclass
class Answer:
    """Granted (``wait_sec`` 0), or refused: for a slot (``slot`` True, come
    back soon) or for a token (come back in ``wait_sec``, a place reserved)."""

    wait_sec: float = 0.0
    slot: bool = False

    @property
    def granted(self) -> bool:
        return not self.wait_sec and not self.slot


def _sql(statement: str, *expanding: str) -> TextClause:
    clause = text(statement)
    if expanding:
        clause = clause.bindparams(*(bindparam(name, expanding=True) for name in expanding))
    return clause


_LEASES = 'kale_concurrency_leases'
_BUCKETS = 'kale_rate_buckets'
_RESERVED = 'kale_rate_reservations'
_LOCK_KEY = _sql('SELECT pg_advisory_xact_lock(hashtext(:key))')
_COUNT_OTHERS = _sql('SELECT count(*) FROM %s WHERE key = :key AND expires_at > :now '
                     'AND holder NOT IN :holders' % _LEASES, 'holders')
_DROP_EXPIRED = _sql('DELETE FROM %s WHERE key = :key AND expires_at <= :now' % _LEASES)
_TAKE_SLOT = _sql('INSERT INTO %s (key, holder, worker, expires_at) '
                  'VALUES (:key, :holder, :worker, :expires_at) ON CONFLICT (key, holder) '
                  'DO UPDATE SET expires_at = excluded.expires_at, worker = excluded.worker'
                  % _LEASES)
_GIVE_BACK = _sql('DELETE FROM %s WHERE key IN :keys AND holder IN :holders' % _LEASES,
                  'keys', 'holders')
_RENEW = _sql('UPDATE %s SET expires_at = :expires_at WHERE key IN :keys AND holder IN :holders'
              % _LEASES, 'keys', 'holders')
_DROP_DEAD = _sql('DELETE FROM %s WHERE expires_at <= :before' % _LEASES)
_HOLDERS = _sql('SELECT holder FROM %s WHERE key = :key AND expires_at > :now '
                'ORDER BY holder' % _LEASES)
_TAKE_RESERVED = _sql('DELETE FROM %s WHERE key = :key AND holder IN :holders '
                      'RETURNING holder, expires_at' % _RESERVED, 'holders')
_READ_BUCKET = 'SELECT tokens, updated_at FROM %s WHERE key = :key' % _BUCKETS
_COUNT_RESERVED = 'SELECT count(*) FROM %s WHERE key = :key AND expires_at > :now' % _RESERVED
_NEW_BUCKET = _sql('INSERT INTO %s (key, tokens, updated_at) VALUES (:key, :tokens, :now) '
                   'ON CONFLICT (key) DO NOTHING' % _BUCKETS)
_WRITE_BUCKET = _sql('UPDATE %s SET tokens = :tokens, updated_at = :updated_at WHERE key = :key'
                     % _BUCKETS)
_DROP_LAPSED = _sql('DELETE FROM %s WHERE key = :key AND expires_at <= :now' % _RESERVED)
_RESERVE = _sql('INSERT INTO %s (key, holder, expires_at) VALUES (:key, :holder, :expires_at) '
                'ON CONFLICT (key, holder) DO UPDATE SET expires_at = excluded.expires_at'
                % _RESERVED)


class FlowState:
    """Token buckets and concurrency leases on one store."""

    def __init__(self, store: RecordStore):
        self.store = store
        self._postgres = store.dialect == 'postgresql'
        # SQLite reads the bucket and counts its places in one statement
        # (BEGIN IMMEDIATE holds every writer off); PostgreSQL counts after
        # the row's lock is held, in a statement of its own, whose snapshot
        # sees what the transaction it waited for committed.
        if self._postgres:
            self._read_bucket = _sql(_READ_BUCKET + ' FOR UPDATE')
            self._count_reserved: Optional[TextClause] = _sql(_COUNT_RESERVED)
        else:
            self._read_bucket = _sql('SELECT tokens, updated_at, (%s) FROM %s WHERE key = :key'
                                     % (_COUNT_RESERVED, _BUCKETS))
            self._count_reserved = None

    def ask(self, asks: Sequence[Ask], now: float, lease_sec: float) -> list[Answer]:
        """Take what each ask needs, in one transaction; a run refused its
        token gives its slot back. The answers, in the asks' order."""
        answers = [Answer() for _ in asks]
        with self.store.begin(write=True) as conn:
            slotted = [i for i in range(len(asks)) if asks[i].limit is not None]
            slotted.sort(key=lambda i: asks[i].slot_key)
            for key, group in itertools.groupby(slotted, key=lambda i: asks[i].slot_key):
                members = list(group)
                self._slots(conn, key, [asks[i] for i in members],
                            [answers[i] for i in members], now, lease_sec)
            rated = [i for i in range(len(asks))
                     if asks[i].rate is not None and answers[i].granted]
            rated.sort(key=lambda i: asks[i].rate_key)
            for key, group in itertools.groupby(rated, key=lambda i: asks[i].rate_key):
                members = list(group)
                self._tokens(conn, key, [asks[i] for i in members],
                             [answers[i] for i in members], now)
            returned = [(ask.slot_key, ask.holder) for ask, answer in zip(asks, answers,
                                                                        strict=True)
                        if ask.limit is not None and answer.wait_sec]
            if returned:                # refused a token: their slots go back
                self._give_back(conn, returned)
        return answers

    def _slots(self, conn: Any, key: str, asks: list[Ask], answers: list[Answer], now: float,
               lease_sec: float) -> None:
        if self._postgres:
            conn.execute(_LOCK_KEY, {'key': 'kale.flow:' + key})
        limit = asks[0].limit
        assert limit is not None
        held = conn.execute(_COUNT_OTHERS, {'key': key, 'now': now, 'holders': sorted(
            {ask.holder for ask in asks})}).scalar() or 0
        if held + len(asks) > limit:    # at the limit: the dead workers' leases go
            conn.execute(_DROP_EXPIRED, {'key': key, 'now': now})
        taken = []
        for ask, answer in zip(asks, answers, strict=True):
            if held >= limit:
                answer.slot = True
                continue
            held += 1
            taken.append({'key': key, 'holder': ask.holder, 'worker': ask.worker,
                          'expires_at': now + lease_sec})
        if taken:
            conn.execute(_TAKE_SLOT, taken)

    def _tokens(self, conn: Any, key: str, asks: list[Ask], answers: list[Answer],
                now: float) -> None:
        rate = asks[0].rate
        assert rate is not None
        # The bucket's row first: on PostgreSQL its lock keeps the key's
        # reservations to this transaction (see the module docstring).
        row = conn.execute(self._read_bucket, {'key': key, 'now': now}).first()
        if row is None:                 # a new key: a full bucket
            conn.execute(_NEW_BUCKET, {'key': key, 'tokens': rate.capacity, 'now': now})
            row = conn.execute(self._read_bucket, {'key': key, 'now': now}).one()
        if self._count_reserved is None:
            reserved = row[2]
        else:
            reserved = conn.execute(self._count_reserved, {'key': key, 'now': now}).scalar()
        bucket = Bucket(row[0], row[1], int(reserved or 0))
        kept = {row[0]: row[1] for row in conn.execute(_TAKE_RESERVED, {
            'key': key, 'holders': sorted({ask.task_id for ask in asks})})}
        places = []
        for ask, answer in zip(asks, answers, strict=True):
            expires_at = kept.pop(ask.task_id, 0.0)
            if expires_at > now:        # back on its place: a token ahead of the new runs
                answer.wait_sec = bucket.take_reserved(rate, now)
                place = bool(answer.wait_sec)
            else:
                answer.wait_sec, place = bucket.take(rate, now)
            if place:
                places.append({'key': key, 'holder': ask.task_id,
                                 'expires_at': now + answer.wait_sec + RESERVATION_GRACE_SEC})
        conn.execute(_WRITE_BUCKET, {'key': key, 'tokens': bucket.tokens,
                                     'updated_at': bucket.updated_at})
        if places:
            conn.execute(_DROP_LAPSED, {'key': key, 'now': now})
            conn.execute(_RESERVE, places)

    @staticmethod
    def _give_back(conn: Any, slots: Sequence[tuple[str, str]]) -> None:
        conn.execute(_GIVE_BACK, {'keys': sorted({key for key, _ in slots}),
                                  'holders': sorted({holder for _, holder in slots})})

    # --- one at a time (tests, tools) -------------------------------------------------

    def take_token(self, key: str, rate: Rate, holder: str, now: float) -> float:
        """Take a token of ``key``'s bucket for the run of task ``holder``
        (ahead of new runs when a place was reserved for it): 0.0 when
        taken, else the whole seconds it should wait (a place is then kept
        for it)."""
        return self.ask([Ask(holder, rate=rate, rate_key=key)], now, 0.0)[0].wait_sec

    def take_slot(self, key: str, limit: int, holder: str, worker: str, now: float,
                  lease_sec: float) -> bool:
        """Take one of ``key``'s ``limit`` slots for ``holder`` until ``now +
        lease_sec`` (leases past their expiry do not count): whether taken."""
        ask = Ask('', limit=limit, slot_key=key, holder=holder, worker=worker)
        return self.ask([ask], now, lease_sec)[0].granted

    def give_back(self, slots: Sequence[tuple[str, str]]) -> None:
        """End the leases ``(key, holder)``: one statement."""
        if not slots:
            return
        with self.store.begin(write=True) as conn:
            self._give_back(conn, slots)

    def renew(self, slots: Sequence[tuple[str, str]], now: float, lease_sec: float) -> int:
        """Move the leases ``(key, holder)`` to ``now + lease_sec`` (those
        still there); returns how many."""
        if not slots:
            return 0
        with self.store.begin(write=True) as conn:
            renewed = int(conn.execute(_RENEW, {
                'keys': sorted({key for key, _ in slots}),
                'holders': sorted({holder for _, holder in slots}),
                'expires_at': now + lease_sec}).rowcount)
            # the leases of dead workers, of any key, a lease's length after
            # they expired (a key at its limit drops its own sooner)
            conn.execute(_DROP_DEAD, {'before': now - lease_sec})
        return renewed

    def holders(self, key: str, now: float) -> list[str]:
        """The holders of ``key``'s live leases (for tests and the operator)."""
        with self.store.begin() as conn:
            return [row[0] for row in conn.execute(_HOLDERS, {'key': key, 'now': now})]
