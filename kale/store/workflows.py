"""The workflows' facet of a store: each workflow's row and its nodes', moved
on by steps a backend gives inside one transaction (:class:`WorkflowSteps`;
docs/explanation/internals-store.md, "Workflows")."""
from __future__ import annotations

import dataclasses
from typing import Any, ContextManager, Optional, Protocol, Sequence

from kale.statuses import NodeStatus, WorkflowStatus


@dataclasses.dataclass(frozen=True)
class Claim:
    """Who publishes a ready node (the process that made it ready, or the
    sweep that took it over), and the epoch time its claim lapses unless
    renewed (docs/explanation/internals-store.md, "Workflows")."""

    owner: str
    until: float


@dataclasses.dataclass(frozen=True)
class WorkflowRow:
    """A workflow: its status, labels, what it gives (JSON, upstream results
    standing as markers) and its times."""

    id: str
    status: str
    labels: Optional[dict[str, str]]
    result: Any
    created_at: float
    deadline_at: Optional[float] = None
    finished_at: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class Node:
    """A node: its task, state and missing inputs, the nodes around it, its
    call and result (serialized and signed), its publish, readiness, end and
    :class:`Claim`."""

    task_id: str
    workflow_id: str
    task: str
    queue: str
    state: str
    missing: int
    upstream: Optional[list[str]]
    downstream: Optional[list[str]]
    call: Optional[str]
    result: Optional[str] = None
    published: int = 0
    queued_at: Optional[float] = None
    reason: Optional[str] = None
    claimed_by: Optional[str] = None
    claimed_until: Optional[float] = None


#: The fields of each row, in order.
WORKFLOW_FIELDS = tuple(field.name for field in dataclasses.fields(WorkflowRow))
NODE_FIELDS = tuple(field.name for field in dataclasses.fields(Node))


class WorkflowSteps(Protocol):
    """The steps of one transaction on the workflows."""

    def add(self, workflow: WorkflowRow, nodes: Sequence[Node]) -> None:
        """Keep a new workflow and its nodes."""

    def deadlines(self, task_ids: Sequence[str]) -> list[tuple[str, Optional[float]]]:
        """The workflows of these nodes (each once), with their deadlines."""

    def succeed(self, task_id: str, result: str) -> Optional[tuple[str, list[str]]]:
        """A ``queued`` node succeeds with ``result``: its workflow and its
        downstream nodes; None (and nothing changed) when it was not queued."""

    def succeed_many(self, done: Sequence[tuple[str, str]]
                     ) -> dict[str, tuple[str, list[str]]]:
        """:meth:`succeed` for several (task id, result) pairs at once: the nodes
        that were queued, by task id (the others change nothing)."""

    def succeed_cancelled(self, task_id: str, result: str) -> bool:
        """A ``cancelled`` node whose task ran all the same succeeds with
        ``result``; nothing moves on. Whether it did."""

    def arrive(self, task_id: str, count: int, now: float,
               claim: Claim) -> Optional[tuple[int, str]]:
        """``count`` inputs of a node arrived: its missing count goes down and,
        when that reaches zero from ``pending``, it is claimed (``queued``
        since ``now``, its publish claimed by ``claim``) in the same step.
        Its count and state after; None when there is no such node."""

    def node(self, task_id: str) -> Node:
        """The node (it exists)."""

    def results(self, task_ids: Sequence[str]) -> dict[str, Optional[str]]:
        """These nodes' stored results, by task id."""

    def all_succeeded(self, workflow_id: str) -> bool:
        """Whether every node of the workflow succeeded."""

    def finish(self, workflow_id: str, status: WorkflowStatus, now: float) -> None:
        """The workflow ends with ``status`` at ``now``, if it is still running."""

    def fail_queued(self, task_id: str, reason: str) -> Optional[str]:
        """A ``queued`` node fails for ``reason``: its workflow, None (and
        nothing changed) when it was not queued."""

    def status(self, workflow_id: str) -> Optional[tuple[str, Optional[float]]]:
        """The workflow's status and deadline, None when there is none."""

    def nodes(self, workflow_id: str, lock: bool = False) -> list[Node]:
        """The workflow's nodes (``lock``: held until the transaction ends,
        where the backend has row locks)."""

    def end_node(self, task_id: str, state: NodeStatus, reason: str) -> None:
        """A node still ``pending`` or ``queued`` ends in ``state`` for ``reason``."""

    def reopen(self, workflow_id: str, deadline_at: Optional[float]) -> bool:
        """A ``failed`` or ``cancelled`` workflow runs again, with
        ``deadline_at``: whether it did (one caller wins)."""

    def reset_node(self, task_id: str, state: NodeStatus, missing: int, now: float,
                   claim: Claim) -> None:
        """A node is to run again: ``pending`` with ``missing`` inputs and no
        claim, or ``queued`` since ``now`` and claimed by ``claim``;
        unpublished, with no result and no reason."""

    def stranded(self, now: float, grace_sec: float, limit: int) -> list[str]:
        """Up to ``limit`` nodes queued and never published whose claim had
        lapsed at ``now`` (a node without one, left by a Kale from before
        claims: queued ``grace_sec`` before ``now`` or earlier)."""

    def claim_stranded(self, task_id: str, now: float, grace_sec: float, claim: Claim) -> bool:
        """Take over a :meth:`stranded` node's publish with ``claim`` if it is still
        stranded at ``now``: whether this caller did."""


class WorkflowStore(Protocol):
    """Workflows and their nodes (``store.workflows``)."""

    def begin(self, write: bool = False) -> ContextManager[WorkflowSteps]:
        """One transaction's steps (``write``: one that changes rows)."""

    def mark_published(self, task_ids: Sequence[str]) -> None:
        """These nodes were published."""

    def renew_claims(self, task_ids: Sequence[str], owner: str, until: float) -> list[str]:
        """The claims ``owner`` holds on these nodes now last until ``until`` (the
        present releases them); the task ids it still holds."""

    def overdue(self, now: float, limit: int = 100) -> list[str]:
        """Running workflows past their deadline."""

    def workflow(self, workflow_id: str) -> Optional[WorkflowRow]:
        """The workflow, None when there is none."""

    def nodes(self, workflow_id: str) -> list[Node]:
        """The workflow's nodes."""

    def workflows(self, status: Optional[str] = None, limit: int = 50,
                  before: Optional[float] = None) -> list[tuple[WorkflowRow, dict[str, int]]]:
        """Up to ``limit`` workflows, newest first (created before ``before``
        when given), each with its count of nodes by state."""


def succeed_each(steps: WorkflowSteps, done: Sequence[tuple[str, str]]
                 ) -> dict[str, tuple[str, list[str]]]:
    """:meth:`WorkflowSteps.succeed_many` one node at a time (where a store
    has no one statement for it)."""
    found = {}
    for task_id, result in done:
        succeeded = steps.succeed(task_id, result)
        if succeeded is not None:
            found[task_id] = succeeded
    return found
