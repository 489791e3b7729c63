"""The outbox's facet of a store: ``kale_outbox`` in the application's own
database, its rows set aside, and the task ids consumed; how a claim ends:
docs/explanation/internals-store.md, "The outbox"."""
from __future__ import annotations

import dataclasses
import threading
from typing import Any, ContextManager, Optional, Protocol, Sequence


@dataclasses.dataclass(frozen=True, slots=True)
class OutboxRow:
    """A message waiting to be sent: its task, queue (its name in the queue
    config), signed body and attributes, delay, FIFO group and deduplication
    id, its task's ``queued`` record, a unique task's key and window, when
    it was written and its publisher's MAC."""

    id: int
    task_id: str
    task: str
    queue: str
    body: str
    attributes: Optional[dict[str, Any]]
    delay_sec: int
    group_id: Optional[str]
    dedup_id: Optional[str]
    record: Optional[dict[str, Any]]
    unique_key: Optional[str]
    unique_for_sec: Optional[float]
    created_at: float
    mac: Optional[str]

    def fields(self) -> dict[str, Any]:
        """The row's columns by name."""
        return {name: getattr(self, name) for name in ROW_FIELDS}


#: The columns of a row (its id first), in the order of the table's columns.
ROW_FIELDS = tuple(field.name for field in dataclasses.fields(OutboxRow))


class Claim(Protocol):
    """The rows one round of the relay holds."""

    rows: list[OutboxRow]

    def set_aside(self, rejected: Sequence[tuple[OutboxRow, str]], now: float) -> None:
        """Keep these rows, as they were, with why, in ``kale_outbox_rejected``."""


class Closeable(Protocol):
    def close(self) -> None: ...


class OutboxStore(Protocol):
    """The relay's side of the outbox (``store.outbox``)."""

    #: Whether several relays, and several rounds of one, may claim at once.
    concurrent: bool

    def init(self) -> list[str]:
        """Bring the tables up to date; what was applied (empty when nothing was)."""

    def hold(self) -> None:
        """Take the database's one relay's place, where it has one (OutboxError
        when another relay holds it); :meth:`let_go` gives it back."""

    def let_go(self) -> None:
        """Give back what :meth:`hold` took."""

    def claim(self, limit: int, fifo: bool) -> ContextManager[Claim]:
        """Up to ``limit`` rows, in insertion order (``fifo``: some queue is
        FIFO, whose rows one round at a time may take, in order). The block
        returns: every row it held is gone; it raises: every row stays."""

    def pending(self, now: float) -> tuple[int, Optional[float]]:
        """Rows waiting, and the age in seconds of the oldest."""

    def purge_consumed(self, before: float) -> int:
        """Forget the ids consumed before ``before``; how many."""

    def listen(self, wake: threading.Event) -> Optional[Closeable]:
        """Set ``wake`` at each insert, where the database tells (None where
        it does not: the relay polls)."""


class OutboxWriter(Protocol):
    """The publish side, on the caller's transaction."""

    def insert(self, rows: Sequence[dict[str, Any]]) -> None:
        """Write these rows (all columns but the id)."""

    def consume(self, task_id: str, now: float) -> bool:
        """Note ``task_id`` consumed: True the first time, False when it already was."""
