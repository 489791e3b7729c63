"""The outbox's facet in memory (see :mod:`kale.store.outbox`): both sides
in one object, under the memory store's lock. It has no transactions: a
row written by :func:`kale.outbox.publish` given this object is there at
once (a test publishes into it and runs a relay on it)."""
from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence

from kale.store.outbox import OutboxRow

if TYPE_CHECKING:
    from kale.store.memory import MemoryStore


class _Claim:
    def __init__(self, rows: list[OutboxRow]):
        self.rows = rows
        self.rejected: list[tuple[OutboxRow, str, float]] = []

    def set_aside(self, rejected: Sequence[tuple[OutboxRow, str]], now: float) -> None:
        self.rejected += [(row, reason[:500], now) for row, reason in rejected]


class MemoryOutbox:
    """Rows by id in insertion order, the rows set aside, the ids consumed; one
    claim at a time holds its rows."""

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
