"""The schedulers' facet of a store: one lease (one leader among any number
of schedulers) and each schedule's progress, a tick claimed once
(docs/explanation/internals-store.md, "Schedules and controls")."""
from __future__ import annotations

import dataclasses
from typing import Iterable, Optional, Protocol

#: The lease's name (one lease: one leader for every schedule).
LEASE = 'scheduler'


@dataclasses.dataclass(frozen=True)
class Lease:
    """Who leads, since when (this holder's leadership) and until when."""

    holder: str
    acquired_at: float
    expires_at: float

    def held_by(self, holder: str, now: float) -> bool:
        return self.holder == holder and self.expires_at > now


@dataclasses.dataclass(frozen=True)
class Progress:
    """A schedule's row: ticks up to ``watermark`` are done; the last one
    published, its task and when."""

    name: str
    watermark: float
    last_tick: Optional[float] = None
    last_task_id: Optional[str] = None
    last_published_at: Optional[float] = None


class ScheduleStore(Protocol):
    """The lease and the schedules' progress (``store.schedules``)."""

    def acquire(self, holder: str, now: float, length_sec: float) -> tuple[bool, Optional[Lease]]:
        """Take or renew (keeping ``acquired_at``) the lease until ``now +
        length_sec`` when it is ``holder``'s or expired: (whether ``holder`` leads, the lease)."""

    def release(self, holder: str, now: float) -> None:
        """Give the lease up, if ``holder``'s: another takes it at once."""

    def lease(self) -> Optional[Lease]:
        """The lease, None when nobody ever held it."""

    def progress(self, names: Optional[Iterable[str]] = None) -> dict[str, Progress]:
        """Each schedule's row, by name (those of ``names``, or all)."""

    def start(self, rows: Iterable[tuple[str, str]], now: float) -> None:
        """Give each new schedule (name, task path) its row, done up to
        ``now``; a schedule that has one keeps it."""

    def claim(self, name: str, holder: str, tick: float, task_id: str, now: float) -> bool:
        """Claim ``tick`` for publishing as ``task_id``: only while ``holder``
        leads and the tick is not done. Whether it was claimed."""

    def unclaim(self, before: Progress, tick: float, task_id: str) -> None:
        """Give back a tick whose send failed: the row as ``before``, if the
        tick is still the one claimed for ``task_id``."""

    def skip(self, name: str, holder: str, up_to: float, now: float) -> bool:
        """Mark the ticks up to ``up_to`` done without publishing them, while
        ``holder`` leads. Whether it moved."""

    def task_statuses(self, task_ids: Iterable[str]) -> dict[str, str]:
        """The records' status of each of these tasks that has a record."""
