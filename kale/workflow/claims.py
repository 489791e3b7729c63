"""This process's claims on the workflow nodes it publishes, renewed while
their publish runs (docs/explanation/internals-workflow.md, "Publish claims")."""
from __future__ import annotations

import contextlib
import logging
import threading
from typing import TYPE_CHECKING, Iterable, Iterator, Optional

from kale.clock import Clock
from kale.events import process_identity
from kale.exceptions import KaleError
from kale.store.workflows import Claim, WorkflowStore

if TYPE_CHECKING:
    from kale.app import App

logger = logging.getLogger(__name__)


class Holding:
    """The claims one publish holds: its store, the nodes it has not
    published yet, and those whose claim it lost (taken over by a sweep)."""

    def __init__(self, store: WorkflowStore, task_ids: Iterable[str], lock: threading.Lock):
        self.store = store
        self.task_ids = set(task_ids)
        self.lost: set[str] = set()
        self._lock = lock                       # its keeper's: the renewer reads these sets

    def sent(self, task_ids: Iterable[str]) -> None:
        """These nodes were sent (to be marked published): their claims
        need no more renewal."""
        with self._lock:
            self.task_ids.difference_update(task_ids)


class ClaimKeeper:
    """The claims of one process (``owner``) on the nodes it publishes, each
    lasting ``claim_sec`` unless renewed (see the docs page the module names)."""

    def __init__(self, owner: str, claim_sec: float, clock: Clock):
        self.owner = owner
        self.claim_sec = claim_sec
        self.clock = clock
        self._lock = threading.Lock()
        self._holds: list[Holding] = []
        self._renewer: Optional[threading.Thread] = None
        self._pause = threading.Event()         # never set: the renewer's wait

    def claim(self, now: float) -> Claim:
        """A claim of this process's, taken at ``now``."""
        return Claim(self.owner, now + self.claim_sec)

    @contextlib.contextmanager
    def holding(self, store: WorkflowStore, task_ids: Iterable[str]) -> Iterator[Holding]:
        """Keep this process's claims on ``task_ids`` while the block
        publishes them; if it raises, release those it did not publish."""
        held = Holding(store, task_ids, self._lock)
        with self._lock:
            self._holds.append(held)
            if self._renewer is None:
                self._renewer = threading.Thread(target=self._renew_while_held,
                                                 name='kale-workflow-claims', daemon=True)
                self._renewer.start()
        try:
            yield held
        except BaseException:
            self._drop(held)
            with self._lock:
                unsent = sorted(held.task_ids - held.lost)
            if unsent:
                try:
                    store.renew_claims(unsent, self.owner, self.clock.time())
                except KaleError as exc:      # they lapse after the grace instead
                    logger.warning('workflow nodes %s: releasing the publish claims failed: '
                                   '%s', ' '.join(unsent[:20]), exc)
            raise
        self._drop(held)

    def _drop(self, held: Holding) -> None:
        with self._lock:
            self._holds.remove(held)

    def renew(self) -> int:
        """Renew every claim held now, for another ``claim_sec``; the ones
        found lost are marked so on their holdings. Returns how many were renewed."""
        stores: dict[int, tuple[WorkflowStore, set[str]]] = {}
        with self._lock:
            holds = list(self._holds)
            for held in holds:
                stores.setdefault(id(held.store), (held.store, set()))[1].update(
                    held.task_ids - held.lost)
        renewed = 0
        until = self.clock.time() + self.claim_sec
        for store, task_ids in stores.values():
            if not task_ids:
                continue
            kept = set(store.renew_claims(sorted(task_ids), self.owner, until))
            renewed += len(kept)
            with self._lock:                   # a node sent meanwhile is not lost
                lost = {task_id for held in holds for task_id in held.task_ids
                        if task_id in task_ids and task_id not in kept}
                for held in holds:
                    held.lost |= held.task_ids & lost
            if lost:
                logger.warning('workflow nodes %s: their publish claims lapsed and a sweep took '
                               'them over: this process does not send them',
                               ' '.join(sorted(lost)[:20]))
        return renewed

    def _renew_while_held(self) -> None:
        while True:
            self._pause.wait(self.claim_sec / 3.0)
            with self._lock:
                if not self._holds:
                    self._renewer = None
                    return
            try:
                self.renew()
            except KaleError as exc:         # the next round tries again
                logger.warning('workflow publish claims: renewing failed: %s', exc)
            except Exception:               # never a renewer gone for good in silence
                logger.exception('workflow publish claims: renewing failed')


def keeper(app: 'App') -> ClaimKeeper:
    """This process's :class:`ClaimKeeper` for ``app`` (its grace, its clock)."""
    return app.part('workflow-claims', lambda: ClaimKeeper(
        process_identity()[0], float(app.config.WORKFLOW_PUBLISH_GRACE_SEC), app.clock))
