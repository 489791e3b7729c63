"""A workflow's state in its store (the workflows facet,
:mod:`kale.store.workflows`): what moves it on, over the store's steps
(docs/explanation/internals-workflow.md, "Submitting and moving on")."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from kale.exceptions import KaleError, WorkflowConflictError, WorkflowNotFoundError
from kale.statuses import FINAL_NODE, NodeStatus, WorkflowStatus
from kale.store.workflows import Node, WorkflowRow, WorkflowSteps, WorkflowStore
from kale.workflow.claims import ClaimKeeper
from kale.workflow.graph import Graph, resolve
from kale.workflow.values import Values, to_json

#: A node's states (:class:`kale.statuses.NodeStatus`). ``pending``: waiting
#: for inputs; ``queued``: published (or about to be); then final.
PENDING, QUEUED = NodeStatus.PENDING, NodeStatus.QUEUED
SUCCEEDED, FAILED, CANCELLED = NodeStatus.SUCCEEDED, NodeStatus.FAILED, NodeStatus.CANCELLED

#: The reason of the nodes a workflow past its deadline failed.
DEADLINE_EXCEEDED = 'deadline_exceeded'


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
