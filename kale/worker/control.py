"""What operators ask of a running worker through the task records: paused queues,
a stop (docs/explanation/internals-worker.md, "What operators ask through the records").
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Iterable, Optional

logger = logging.getLogger('kale.worker')


class QueuePauses:
    """The names of the paused queues, as last read; thread-safe."""

    def __init__(self) -> None:
        self._paused: frozenset[str] = frozenset()
        self._changed = threading.Condition()

    def __contains__(self, name: str) -> bool:
        return name in self._paused

    def set(self, names: Iterable[str]) -> tuple[set[str], set[str]]:
        """The paused queues are now ``names``: (those paused, those resumed)."""
        new = frozenset(names)
        with self._changed:
            old, self._paused = self._paused, new
            self._changed.notify_all()
        return set(new - old), set(old - new)

    def wait(self, name: str, seconds: float) -> None:
        """Wait up to ``seconds`` while the queue ``name`` stays paused."""
        with self._changed:
            self._changed.wait_for(lambda: name not in self._paused, timeout=seconds)


class WorkerControl:
    """Applies what the records say to one worker (or supervisor): its
    paused queues, and a stop asked of it (once)."""

    def __init__(self, name: str, target: Any, pauses: Optional[QueuePauses] = None,
                 queues: Iterable[str] = ()):
        self.name = name
        self.target = target                # has .stop()
        self.pauses = pauses
        #: The queues it serves: only their pauses are logged.
        self.queues = set(queues)
        self.stop_asked = False

    def __call__(self, stop_at: Optional[float], paused: Iterable[str]) -> None:
        if self.pauses is not None:
            now_paused, resumed = self.pauses.set(paused)
            for verb, names in (('paused', now_paused), ('resumed', resumed)):
                mine = sorted(names & self.queues) if self.queues else sorted(names)
                if mine:
                    logger.info('%s: queue %s %s: %s', self.name, ', '.join(mine), verb,
                                'receiving from it again' if verb == 'resumed'
                                else 'receiving nothing from it until it is resumed')
        if stop_at is not None and not self.stop_asked:
            self.stop_asked = True
            logger.info('%s: a stop was asked (kale workers stop); finishing what runs, '
                        'then stopping', self.name)
            self.target.stop()
