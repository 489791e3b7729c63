"""The unique keys' facet in memory (see :class:`kale.store.unique.UniqueStore`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from kale.statuses import FINAL_TASK
from kale.store.unique import claim_each

if TYPE_CHECKING:
    from kale.store.memory import MemoryStore


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
