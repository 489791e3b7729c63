"""The buckets and leases of flow control, in the task records database.

A worker asks once per batch (:meth:`FlowState.ask`): one short write
transaction for all the batch's limited messages. On SQLite, BEGIN
IMMEDIATE serializes the writers; on PostgreSQL a concurrency key's leases
are counted under a transaction-scoped advisory lock on the key, and a
bucket's row is read FOR UPDATE, the leases' keys first then the buckets',
each in order, so two workers never wait on each other in a circle. Times
are epoch seconds from the callers' clocks, so the workers' clocks must
agree to well under a second.

Costs, in statements, in that one transaction: per concurrency key a
DELETE of its expired leases, a COUNT, and an INSERT per slot taken; per
rate key an INSERT of a new bucket (ON CONFLICT DO NOTHING), a SELECT, an
UPDATE, a DELETE of the batch's reservations (RETURNING: a reserved run
needs no token), and for refused runs a DELETE of the key's lapsed
reservations and an INSERT of theirs. A slot given back is one DELETE; a
worker's renewal one UPDATE for all its leases.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Optional, Sequence

from sqlalchemy import delete, func, select, text, update

from kale.flow.bucket import Bucket
from kale.flow.spec import Rate
from kale.records.driver import insert_for
from kale.records.schema import concurrency_leases, rate_buckets, rate_reservations
from kale.records.store import RecordStore

#: Seconds a token reserved for a refused run is kept after the run was told
#: to come back; one not taken by then is lost (the run, if it comes, asks again).
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
    back soon) or for a token (come back in ``wait_sec``, a token reserved)."""

    wait_sec: float = 0.0
    slot: bool = False

    @property
    def granted(self) -> bool:
        return not self.wait_sec and not self.slot


class FlowState:
    """Token buckets and concurrency leases on one records store."""

    def __init__(self, store: RecordStore):
        self.store = store
        self._insert = insert_for(store.dialect)
        self._postgres = store.dialect == 'postgresql'

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
            c = concurrency_leases.c
            for ask, answer in zip(asks, answers, strict=True):
                if ask.limit is not None and answer.wait_sec:       # its slot goes back
                    conn.execute(delete(concurrency_leases).where(
                        c.key == ask.slot_key, c.holder == ask.holder))
        return answers

    def _slots(self, conn: Any, key: str, asks: list[Ask], answers: list[Answer], now: float,
               lease_sec: float) -> None:
        c = concurrency_leases.c
        if self._postgres:
            conn.execute(text('SELECT pg_advisory_xact_lock(hashtext(:key))'),
                         {'key': 'kale.flow:' + key})
        conn.execute(delete(concurrency_leases).where(c.key == key, c.expires_at <= now))
        holders = {ask.holder for ask in asks}
        held = conn.execute(select(func.count()).select_from(concurrency_leases).where(
            c.key == key, c.holder.not_in(holders))).scalar() or 0
        for ask, answer in zip(asks, answers, strict=True):
            assert ask.limit is not None
            if held >= ask.limit:
                answer.slot = True
                continue
            held += 1
            conn.execute(self._insert(concurrency_leases).values(
                key=key, holder=ask.holder, worker=ask.worker, expires_at=now + lease_sec,
            ).on_conflict_do_update(index_elements=[c.key, c.holder],
                                    set_={'expires_at': now + lease_sec, 'worker': ask.worker}))

    def _tokens(self, conn: Any, key: str, asks: list[Ask], answers: list[Answer],
                now: float) -> None:
        b, r = rate_buckets.c, rate_reservations.c
        rate = asks[0].rate
        assert rate is not None
        kept = {row.holder: row.expires_at for row in conn.execute(
            delete(rate_reservations).where(r.key == key, r.holder.in_(
                {ask.task_id for ask in asks})).returning(r.holder, r.expires_at))}
        conn.execute(self._insert(rate_buckets).values(
            key=key, tokens=rate.capacity, updated_at=now,
        ).on_conflict_do_nothing(index_elements=[b.key]))
        row = conn.execute(select(b.tokens, b.updated_at).where(
            b.key == key).with_for_update()).one()
        bucket = Bucket(row.tokens, row.updated_at)
        reserved = []
        for ask, answer in zip(asks, answers, strict=True):
            if kept.pop(ask.task_id, 0.0) > now:
                continue                    # its token was reserved when it was refused
            wait, reserve = bucket.take(rate, now)
            answer.wait_sec = wait
            if reserve:
                reserved.append({'key': key, 'holder': ask.task_id,
                                 'expires_at': now + wait + RESERVATION_GRACE_SEC})
        conn.execute(update(rate_buckets).where(b.key == key).values(
            tokens=bucket.tokens, updated_at=bucket.updated_at))
        if reserved:
            conn.execute(delete(rate_reservations).where(r.key == key, r.expires_at <= now))
            conn.execute(self._insert(rate_reservations).on_conflict_do_update(
                index_elements=[r.key, r.holder],
                set_={'expires_at': self._insert(rate_reservations).excluded.expires_at}),
                reserved)

    # --- one at a time (tests, tools) -------------------------------------------------

    def take_token(self, key: str, rate: Rate, holder: str, now: float) -> float:
        """Take a token of ``key``'s bucket for the run of task ``holder``:
        0.0 when taken (or reserved for it earlier), else the whole seconds
        it should wait (a token is then reserved for it)."""
        return self.ask([Ask(holder, rate=rate, rate_key=key)], now, 0.0)[0].wait_sec

    def take_slot(self, key: str, limit: int, holder: str, worker: str, now: float,
                  lease_sec: float) -> bool:
        """Take one of ``key``'s ``limit`` slots for ``holder`` until ``now +
        lease_sec`` (leases past their expiry are dropped first): whether taken."""
        ask = Ask('', limit=limit, slot_key=key, holder=holder, worker=worker)
        return self.ask([ask], now, lease_sec)[0].granted

    def give_back(self, slots: Sequence[tuple[str, str]]) -> None:
        """End the leases ``(key, holder)``."""
        if not slots:
            return
        c = concurrency_leases.c
        with self.store.begin(write=True) as conn:
            for key, holder in slots:
                conn.execute(delete(concurrency_leases).where(c.key == key, c.holder == holder))

    def renew(self, worker: str, now: float, lease_sec: float) -> int:
        """Move every lease of ``worker`` to ``now + lease_sec``; returns how many."""
        c = concurrency_leases.c
        with self.store.begin(write=True) as conn:
            return conn.execute(update(concurrency_leases).where(c.worker == worker).values(
                expires_at=now + lease_sec)).rowcount

    def holders(self, key: str, now: float) -> list[str]:
        """The holders of ``key``'s live leases (for tests and the operator)."""
        c = concurrency_leases.c
        with self.store.begin() as conn:
            return [row.holder for row in conn.execute(select(c.holder).where(
                c.key == key, c.expires_at > now).order_by(c.holder))]
