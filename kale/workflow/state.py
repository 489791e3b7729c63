"""A workflow's state in its store (the workflows facet,
:mod:`kale.store.workflows`): what moves it on, over the store's steps, and this
process's claims on the nodes it publishes, renewed while their publish runs
(docs/explanation/internals-workflow.md, "Submitting and moving on", "Publish claims")."""
from __future__ import annotations

import contextlib
import logging
import threading
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Optional, Sequence

from kale.clock import Clock
from kale.events import process_identity
from kale.exceptions import KaleError, WorkflowConflictError, WorkflowNotFoundError
from kale.statuses import FINAL_NODE, NodeStatus, WorkflowStatus
from kale.store.workflows import Claim, Node, WorkflowRow, WorkflowSteps, WorkflowStore
from kale.workflow.graph import Graph, resolve
from kale.workflow.values import Values, to_json

if TYPE_CHECKING:
    from kale.app import App

logger = logging.getLogger(__name__)

#: A node's states (:class:`kale.statuses.NodeStatus`). ``pending``: waiting
#: for inputs; ``queued``: published (or about to be); then final.
PENDING, QUEUED = NodeStatus.PENDING, NodeStatus.QUEUED
SUCCEEDED, FAILED, CANCELLED = NodeStatus.SUCCEEDED, NodeStatus.FAILED, NodeStatus.CANCELLED

#: The reason of the nodes a workflow past its deadline failed.
DEADLINE_EXCEEDED = 'deadline_exceeded'


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


class WorkflowState:
    """The workflows of one store (its ``workflows`` facet); the nodes this
    process makes ready are claimed for its publish by ``claims``."""

    def __init__(self, store: WorkflowStore, values: Values, claims: ClaimKeeper):
        self.store = store
        self.values = values
        self.claims = claims
        #: The published nodes the last :meth:`complete` failed for being
        #: past the workflow's deadline (their tasks are to be cancelled).
        self.expired: list[str] = []

    def record(self, workflow_id: str, graph: Graph, queues: Mapping[str, str],
               labels: Optional[Mapping[str, str]], deadline_at: Optional[float],
               now: float) -> None:
        """Every node, ``pending`` or (without inputs) ``queued`` and claimed
        for this process's publish, in one transaction."""
        claim = self.claims.claim(now)
        nodes = []
        for node in graph.nodes.values():
            queue, ready = queues[node.task_id], not node.upstream
            call = self.values.pack_call(node.task_id, node.name, queue,
                                         {'args': list(node.args), 'kwargs': node.kwargs,
                                          **node.wait})
            nodes.append(Node(node.task_id, workflow_id, node.name, queue,
                              QUEUED if ready else PENDING, len(node.upstream),
                              list(node.upstream), list(node.downstream), call,
                              queued_at=now if ready else None,
                              claimed_by=claim.owner if ready else None,
                              claimed_until=claim.until if ready else None))
        workflow = WorkflowRow(workflow_id, WorkflowStatus.RUNNING, dict(labels or {}) or None,
                               to_json(graph.result), now, deadline_at)
        with self.store.begin(write=True) as steps:
            steps.add(workflow, nodes)

    def complete(self, task_id: str, result: Any, now: float) -> list[dict[str, Any]]:
        """:meth:`complete_many` for one node that succeeded with ``result``
        (InvalidFlowError when the result cannot be kept)."""
        return self.complete_many([(task_id, self.values.pack_result(task_id, result))], now)

    def complete_many(self, done: Sequence[tuple[str, str]], now: float) -> list[dict[str, Any]]:
        """Nodes succeeded, their results packed (``Values.pack_result``), in one
        transaction: the nodes that now have all their inputs, each once, resolved
        and claimed for this process's publish (the docs page the module names)."""
        self.expired = []
        claim = self.claims.claim(now)
        with self.store.begin(write=True) as steps:
            for workflow_id, deadline_at in steps.deadlines([t for t, _ in done]):
                if deadline_at is not None:
                    self.expired += self._expire(steps, workflow_id, now)
            arrivals, sinks = _succeed(steps, done)
            ready = []
            for later, count in arrivals.items():
                left = steps.arrive(later, count, now, claim)
                if left is not None and left[0] == 0 and left[1] == QUEUED:
                    ready.append(self._resolved(steps, later))
            for workflow_id in sinks:
                if steps.all_succeeded(workflow_id):
                    steps.finish(workflow_id, WorkflowStatus.SUCCEEDED, now)
            return ready

    def _resolved(self, steps: WorkflowSteps, task_id: str) -> dict[str, Any]:
        node = steps.node(task_id)
        results = self._unpacked(steps, node.upstream or ())
        call = self.values.unpack_call(node.task_id, node.task, node.queue, node.call)
        return {'task_id': node.task_id, 'task': node.task, 'queue': node.queue,
                'workflow_id': node.workflow_id,
                'args': tuple(resolve(call['args'], results)),
                'kwargs': resolve(call['kwargs'], results),
                'wait': {key: call[key] for key in ('delay_sec', 'eta') if key in call}}

    def results(self, task_ids: Sequence[str]) -> dict[str, Any]:
        """The results of these succeeded nodes, checked and deserialized."""
        with self.store.begin() as steps:
            return self._unpacked(steps, task_ids)

    def _unpacked(self, steps: WorkflowSteps, task_ids: Sequence[str]) -> dict[str, Any]:
        return {task_id: self.values.unpack_result(task_id, stored)
                for task_id, stored in steps.results(task_ids).items()}

    def fail(self, task_id: str, reason: str, now: float) -> list[str]:
        """The node failed for good, and so the workflow; what the node's failure
        ends (:func:`_failed_from`): the published nodes, whose tasks are to be cancelled."""
        with self.store.begin(write=True) as steps:
            workflow_id = steps.fail_queued(task_id, reason[:2000])
            if workflow_id is None:
                return []
            return self._end(steps, workflow_id, WorkflowStatus.FAILED, now,
                             first_failed=task_id)

    def expire(self, workflow_id: str, now: float) -> list[str]:
        """A running workflow past its deadline fails its unfinished nodes
        (``deadline_exceeded``); returns the published ones, as :meth:`fail` does."""
        with self.store.begin(write=True) as steps:
            return self._expire(steps, workflow_id, now)

    def _expire(self, steps: WorkflowSteps, workflow_id: str, now: float) -> list[str]:
        found = steps.status(workflow_id)
        if found is None or found[0] != WorkflowStatus.RUNNING or found[1] is None or now <= found[1]:
            return []
        return self._end(steps, workflow_id, WorkflowStatus.FAILED, now)

    def cancel(self, workflow_id: str, now: float) -> list[str]:
        """Cancel every node that is not final, and the workflow; returns the
        published nodes cancelled (their tasks are to be cancelled too)."""
        with self.store.begin(write=True) as steps:
            return self._end(steps, workflow_id, WorkflowStatus.CANCELLED, now)

    def _end(self, steps: WorkflowSteps, workflow_id: str, status: WorkflowStatus, now: float,
             first_failed: Optional[str] = None) -> list[str]:
        rows = {node.task_id: node for node in steps.nodes(workflow_id)}
        states = {task_id: node.state for task_id, node in rows.items()}
        if first_failed is not None:
            reasons = _failed_from(rows, states, first_failed)
        else:
            ending, reason = (FAILED, DEADLINE_EXCEEDED) if status is WorkflowStatus.FAILED \
                else (CANCELLED, 'workflow cancelled')
            reasons = {node: reason for node in rows if states[node] not in FINAL_NODE}
            states.update(dict.fromkeys(reasons, ending))
        for node, why in reasons.items():
            steps.end_node(node, NodeStatus(states[node]), why)
        steps.finish(workflow_id, status, now)
        return [node for node in reasons if rows[node].published]

    def retry(self, workflow_id: str, deadline_at: Optional[float],
              now: float) -> list[dict[str, Any]]:
        """:func:`kale.workflow.retry`'s transaction: the workflow ``running``
        (with ``deadline_at``), its nodes waiting again (:meth:`_wait_again`);
        the nodes ready now, resolved (WorkflowConflictError unless it failed or was cancelled)."""
        with self.store.begin(write=True) as steps:
            if not steps.reopen(workflow_id, deadline_at):
                raise _not_retried(steps, workflow_id)
            rows = steps.nodes(workflow_id, lock=True)
            succeeded = {node.task_id for node in rows if node.state == SUCCEEDED}
            ready = self._wait_again(steps, rows, succeeded, now)
            if len(succeeded) == len(rows):
                steps.finish(workflow_id, WorkflowStatus.SUCCEEDED, now)
            return [self._resolved(steps, task_id) for task_id in ready]

    def _wait_again(self, steps: WorkflowSteps, rows: Sequence[Node], succeeded: set[str],
                    now: float) -> list[str]:
        """Each node neither succeeded nor in flight waits again for its
        inputs that did not succeed; those that wait for none, claimed."""
        claim = self.claims.claim(now)
        ready = []
        for node in rows:
            if node.state in (SUCCEEDED, QUEUED):    # kept, or in flight
                continue
            missing = sum(1 for up in node.upstream or () if up not in succeeded)
            steps.reset_node(node.task_id, PENDING if missing else QUEUED, missing, now, claim)
            if not missing:
                ready.append(node.task_id)
        return ready

    def stranded(self, now: float, grace_sec: float, limit: int = 100) -> list[dict[str, Any]]:
        """Nodes ready but never published whose publish claim lapsed (or,
        unclaimed, ready for over ``grace_sec``), each taken over by this
        process's claim, resolved, for the caller to publish."""
        with self.store.begin() as steps:      # most sweeps find nothing: no write lock
            if not steps.stranded(now, grace_sec, 1):
                return []
        claim = self.claims.claim(now)
        with self.store.begin(write=True) as steps:
            return [self._resolved(steps, task_id)
                    for task_id in steps.stranded(now, grace_sec, limit)
                    if steps.claim_stranded(task_id, now, grace_sec, claim)]

    def overdue(self, now: float, limit: int = 100) -> list[str]:
        """Running workflows past their deadline."""
        return self.store.overdue(now, limit)

    def mark_published(self, task_ids: Sequence[str]) -> None:
        self.store.mark_published(task_ids)


def _not_retried(steps: WorkflowSteps, workflow_id: str) -> KaleError:
    found = steps.status(workflow_id)
    if found is None:
        return WorkflowNotFoundError('no workflow %s in the task records' % workflow_id[:200])
    return WorkflowConflictError('workflow %s cannot be retried: it is %s (only a failed or '
                                 'cancelled one can be)' % (workflow_id, found[0]))


def _succeed(steps: WorkflowSteps, done: Sequence[tuple[str, str]]
             ) -> tuple[dict[str, int], set[str]]:
    """The queued nodes among ``done`` succeed: how many inputs arrive at
    each downstream node, and the workflows whose last node succeeded."""
    arrivals: dict[str, int] = {}
    sinks: set[str] = set()
    succeeded = steps.succeed_many(done)
    for task_id, stored in done:
        if task_id not in succeeded:     # not queued: a second delivery, or a node
            # cancelled while its task ran (its workflow ended): it succeeded all the same
            steps.succeed_cancelled(task_id, stored)
            continue
        workflow_id, downstream = succeeded.pop(task_id)
        for later in downstream:
            arrivals[later] = arrivals.get(later, 0) + 1
        if not downstream:               # the last node to succeed has no downstream
            sinks.add(workflow_id)
    return arrivals, sinks


def _failed_from(rows: Mapping[str, Node], states: dict[str, str],
                 first_failed: str) -> dict[str, str]:
    """What a node's failure ends (the docs page the module names); ``states``
    is changed in place; the reasons, by node."""
    reasons: dict[str, str] = {}
    later = list(rows[first_failed].downstream or ())
    while later:                                 # everything downstream fails
        node = later.pop()
        if states[node] not in FINAL_NODE:
            states[node], reasons[node] = FAILED, 'upstream_failed'
            later.extend(rows[node].downstream or ())
    while True:                                  # what only fed failed nodes is useless
        useless = [node for node, row in rows.items() if _only_feeds_ended(row, states)]
        if not useless:
            return reasons
        for node in useless:
            states[node], reasons[node] = CANCELLED, 'not needed: upstream_failed'


def _only_feeds_ended(row: Node, states: Mapping[str, str]) -> bool:
    """Whether an unfinished node feeds only nodes that failed or were cancelled."""
    downstream = row.downstream or ()
    return states[row.task_id] not in FINAL_NODE and bool(downstream) and all(
        states[d] in (FAILED, CANCELLED) for d in downstream)
