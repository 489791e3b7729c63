"""The controls' facet of a store: paused queues and stops asked of workers,
one row of ``kale_controls`` each (:data:`PAUSE` or :data:`STOP`), read by
the workers with their heartbeat (docs/explanation/internals-store.md)."""
from __future__ import annotations

from typing import Callable, Optional, Protocol

#: The kind of a paused queue's row.
PAUSE = 'pause'
#: The kind of a stop asked of a worker.
STOP = 'stop'


class ControlStore(Protocol):
    """Paused queues and stops asked of workers (``store.controls``)."""

    def pause(self, queue: str, now: float) -> float:
        """Pause ``queue``; when it was paused (the first pause's time when
        it already was)."""

    def resume(self, queue: str) -> bool:
        """Resume ``queue``: whether it was paused."""

    def paused(self) -> dict[str, float]:
        """Every paused queue, and since when."""

    def ask_stop(self, worker_id: str, now: float) -> float:
        """Ask the worker (or supervisor) ``worker_id`` to stop; when that
        was first asked."""

    def stops(self) -> dict[str, float]:
        """Every worker a stop was asked of, and when."""

    def forget_stop(self, worker_id: str) -> None:
        """The worker stopped: its stop's row goes."""

    def read(self, worker_id: str) -> tuple[Optional[float], list[str]]:
        """What a worker reads with its heartbeat, in one question: when a
        stop was asked of it (None: not), and the paused queues."""


class ControlRows:
    """A :class:`ControlStore` made of three steps on its rows, which each
    store writes its own way: add a row (keeping an earlier one's time),
    the rows of a kind, remove a row."""

    _add: Callable[[str, str, float], float]
    _of: Callable[[str], dict[str, float]]
    _remove: Callable[[str, str], bool]

    def pause(self, queue: str, now: float) -> float:
        return self._add(PAUSE, queue, now)

    def resume(self, queue: str) -> bool:
        return self._remove(PAUSE, queue)

    def paused(self) -> dict[str, float]:
        return self._of(PAUSE)

    def ask_stop(self, worker_id: str, now: float) -> float:
        return self._add(STOP, worker_id, now)

    def stops(self) -> dict[str, float]:
        return self._of(STOP)

    def forget_stop(self, worker_id: str) -> None:
        self._remove(STOP, worker_id)
