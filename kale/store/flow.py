"""The flow-control facet of a store: token buckets and concurrency leases.
What an ask decides is written once (:func:`decide`) over the steps a
backend gives inside its transaction (:class:`FlowSteps`); reservations,
lease holders and clocks: docs/explanation/internals-store.md, "Flow control"."""
from __future__ import annotations

import dataclasses
import itertools
from typing import Callable, Optional, Protocol, Sequence

from kale.flow.bucket import Bucket
from kale.flow.spec import Rate

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


class FlowStore(Protocol):
    """Buckets and leases (``store.flow``)."""

    def ask(self, asks: Sequence[Ask], now: float, lease_sec: float) -> list[Answer]:
        """Take what each ask needs, in one transaction; a run refused its
        token gives its slot back. The answers, in the asks' order."""

    def give_back(self, slots: Sequence[tuple[str, str]]) -> None:
        """End the leases ``(key, holder)``."""

    def renew(self, slots: Sequence[tuple[str, str]], now: float, lease_sec: float) -> int:
        """Move the leases ``(key, holder)`` still there to ``now + lease_sec``, and
        drop those expired for longer than a lease; how many were renewed."""

    def holders(self, key: str, now: float) -> list[str]:
        """The holders of ``key``'s live leases, in order (tests, the operator)."""


class FlowSteps(Protocol):
    """The steps :func:`decide` takes, inside one backend's transaction."""

    def lock_slots(self, key: str) -> None:
        """Hold ``key``'s leases to this transaction until it ends."""

    def count_others(self, key: str, holders: list[str], now: float) -> int:
        """How many live leases of ``key`` are held by others than ``holders``."""

    def drop_expired(self, key: str, now: float) -> None:
        """Drop ``key``'s expired leases."""

    def take_slots(self, key: str, taken: list[tuple[str, str]], expires_at: float) -> None:
        """Hold a lease of ``key`` for each (holder, worker) until ``expires_at``."""

    def read_bucket(self, key: str, rate: Rate, now: float) -> Bucket:
        """``key``'s bucket (a new one, full, is made), with its live places
        counted; the bucket's row is held to this transaction."""

    def take_reserved(self, key: str, holders: list[str]) -> dict[str, float]:
        """Take the places of these task ids out of ``key``'s line: their expiry, by id."""

    def write_bucket(self, key: str, bucket: Bucket) -> None:
        """Store the bucket's tokens and time."""

    def reserve(self, key: str, places: list[tuple[str, float]], now: float) -> None:
        """Drop ``key``'s lapsed places, then keep one per (task id, expiry)."""

    def give_back(self, slots: Sequence[tuple[str, str]]) -> None:
        """End the leases ``(key, holder)``."""


def decide(steps: FlowSteps, asks: Sequence[Ask], now: float, lease_sec: float) -> list[Answer]:
    """Answer the asks with ``steps``: the slots first, key by key in order,
    then the tokens, key by key in order (so two workers never wait on each
    other in a circle); a run refused a token gives its slot back."""
    answers = [Answer() for _ in asks]
    for key, members in _by_key(asks, lambda ask, answer: ask.limit is not None, answers,
                                lambda ask: ask.slot_key):
        _slots(steps, key, [asks[i] for i in members], [answers[i] for i in members], now,
               lease_sec)
    for key, members in _by_key(asks, lambda ask, answer: ask.rate is not None
                                and answer.granted, answers, lambda ask: ask.rate_key):
        _tokens(steps, key, [asks[i] for i in members], [answers[i] for i in members], now)
    returned = _refused_slots(asks, answers)
    if returned:                        # refused a token: their slots go back
        steps.give_back(returned)
    return answers


def _by_key(asks: Sequence[Ask], wanted: Callable[[Ask, Answer], bool], answers: list[Answer],
            key: Callable[[Ask], str]) -> list[tuple[str, list[int]]]:
    """The indexes of the asks wanted, grouped by their key, the keys in order."""
    ordered = sorted((i for i in range(len(asks)) if wanted(asks[i], answers[i])),
                     key=lambda i: key(asks[i]))
    return [(name, list(group)) for name, group in
            itertools.groupby(ordered, key=lambda i: key(asks[i]))]


def _refused_slots(asks: Sequence[Ask], answers: list[Answer]) -> list[tuple[str, str]]:
    """The slots taken by runs then refused a token."""
    return [(ask.slot_key, ask.holder) for ask, answer in zip(asks, answers, strict=True)
            if ask.limit is not None and answer.wait_sec]


def _slots(steps: FlowSteps, key: str, asks: list[Ask], answers: list[Answer], now: float,
           lease_sec: float) -> None:
    steps.lock_slots(key)
    limit = asks[0].limit
    assert limit is not None
    held = steps.count_others(key, sorted({ask.holder for ask in asks}), now)
    if held + len(asks) > limit:        # at the limit: the dead workers' leases go
        steps.drop_expired(key, now)
    taken = []
    for ask, answer in zip(asks, answers, strict=True):
        if held >= limit:
            answer.slot = True
            continue
        held += 1
        taken.append((ask.holder, ask.worker))
    if taken:
        steps.take_slots(key, taken, now + lease_sec)


def _tokens(steps: FlowSteps, key: str, asks: list[Ask], answers: list[Answer],
            now: float) -> None:
    rate = asks[0].rate
    assert rate is not None
    bucket = steps.read_bucket(key, rate, now)
    # With no live place in the key's line, none is this batch's: a step less
    # while the bucket's row is held (a lapsed place left goes at the next reserve).
    kept = steps.take_reserved(key, sorted({ask.task_id for ask in asks})) \
        if bucket.reserved else {}
    places = []
    back = {id(ask) for ask in asks if kept.get(ask.task_id, 0.0) > now}
    # Runs back on their places first: each takes a token ahead of the new runs.
    for ask, answer in sorted(zip(asks, answers, strict=True), key=lambda pair: id(pair[0])
                              not in back):
        if id(ask) in back:
            answer.wait_sec = bucket.take_reserved(rate, now)
            place = bool(answer.wait_sec)
        else:
            answer.wait_sec, place = bucket.take(rate, now)
        if place:
            places.append((ask.task_id, now + answer.wait_sec + RESERVATION_GRACE_SEC))
    steps.write_bucket(key, bucket)
    if places:
        steps.reserve(key, places, now)
