"""The flow-control facet in memory (see :mod:`kale.store.flow`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from kale.flow.bucket import Bucket
from kale.flow.spec import Rate
from kale.store.flow import Answer, Ask, decide

if TYPE_CHECKING:
    from kale.store.memory import MemoryStore


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
