"""The controls' facet in memory (see :class:`kale.store.controls.ControlStore`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from kale.store.controls import PAUSE, STOP, ControlRows

if TYPE_CHECKING:
    from kale.store.memory import MemoryStore


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
