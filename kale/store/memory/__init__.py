"""The memory store, and its workflows' facet: every facet kept in this
process's memory, behind one lock, for unit tests (a process's tasks and
workers cannot share it)."""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import threading
from typing import Any, Iterator, Optional, Sequence

from kale.statuses import NodeStatus, WorkflowStatus
from kale.store.memory import facets
from kale.store.memory.records import MemoryQueries, MemoryRecords
from kale.store.workflows import Claim, Node, WorkflowRow, succeed_each

PENDING, QUEUED = NodeStatus.PENDING, NodeStatus.QUEUED


class MemoryStore:
    """A store in this process's memory, on ``memory://NAME``: every store
    opened on one name is the same database (its rows, and the keys of the first
    opened, which seal them), as two apps share a database file's rows."""

    #: No file: a spool of outcomes goes to the user's cache.
    database_file = None

    def __new__(cls, url: str = 'memory://', config: Optional[Any] = None) -> 'MemoryStore':
        with _opening:
            found = _databases.get(url)
            if found is None:
                found = _databases[url] = super().__new__(cls)
                found._open(url, config)
            return found

    def _open(self, url: str, config: Optional[Any]) -> None:
        self.url = url
        #: Whose keys seal and sign the task records (none: kept as given).
        self.config = config
        self.lock = threading.RLock()
        self.schedules = facets.MemorySchedules(self)
        self.unique = facets.MemoryUnique(self)
        self.flow = facets.MemoryFlow(self)
        self.webhooks = facets.MemoryWebhooks(self)
        self.controls = facets.MemoryControls(self)
        self.workflows = MemoryWorkflows(self)
        self.outbox = facets.MemoryOutbox(self)
        self.records = MemoryRecords(self)
        self.queries = MemoryQueries(self.records)

    def __repr__(self) -> str:
        return 'MemoryStore(%r)' % self.url

    def migrate(self) -> None:
        """No tables to bring up to date."""

    def dispose(self) -> None:
        """No connections to let go of."""

    @functools.cached_property
    def sealer(self) -> Any:
        """The configuration's sealer, or one that keeps rows as given."""
        if self.config is None:
            return _Plain()
        from kale.store.sealing import Sealer
        return Sealer(self.config)

    def status_of(self, task_id: str) -> Optional[str]:
        """The task's record's status (None without a record), for other facets."""
        with self.lock:
            row = self.records.tasks.get(task_id)
            return str(row['status']) if row is not None else None


#: The databases of this process, by URL (``memory://NAME``).
_databases: dict[str, MemoryStore] = {}
_opening = threading.Lock()


class _Plain:
    """Keeps rows as given: no keys to sign or seal with."""

    sealing = dropping = False

    @staticmethod
    def stored(row: dict[str, Any], published: bool = False) -> dict[str, Any]:
        return row

    @staticmethod
    def open_row(row: dict[str, Any]) -> dict[str, Any]:
        return row



class MemoryWorkflows:
    """Workflows and nodes by id, under the memory store's lock. Rows are
    frozen and replaced, never changed: a write transaction that raises puts
    the dictionaries back as they were."""

    def __init__(self, root: 'MemoryStore'):
        self.root = root
        self.rows: dict[str, WorkflowRow] = {}
        self.node_rows: dict[str, Node] = {}

    @contextlib.contextmanager
    def begin(self, write: bool = False) -> Iterator['MemoryWorkflows']:
        with self.root.lock:
            kept = dict(self.rows), dict(self.node_rows)
            try:
                yield self
            except BaseException:
                self.rows, self.node_rows = kept
                raise

    def mark_published(self, task_ids: Sequence[str]) -> None:
        with self.root.lock:
            for task_id in task_ids:
                if task_id in self.node_rows:
                    self._change(task_id, published=1)

    def renew_claims(self, task_ids: Sequence[str], owner: str, until: float) -> list[str]:
        with self.root.lock:
            held = [task_id for task_id in task_ids if task_id in self.node_rows
                    and self.node_rows[task_id].claimed_by == owner]
            for task_id in held:
                self._change(task_id, claimed_until=until)
            return held

    def overdue(self, now: float, limit: int = 100) -> list[str]:
        with self.root.lock:
            return [row.id for row in self.rows.values() if row.status == WorkflowStatus.RUNNING
                    and row.deadline_at is not None and row.deadline_at < now][:limit]

    def workflow(self, workflow_id: str) -> Optional[WorkflowRow]:
        with self.root.lock:
            return self.rows.get(workflow_id)

    def workflows(self, status: Optional[str] = None, limit: int = 50,
                  before: Optional[float] = None) -> list[tuple[WorkflowRow, dict[str, int]]]:
        with self.root.lock:
            rows = sorted((row for row in self.rows.values()
                           if (status is None or row.status == status)
                           and (before is None or row.created_at < before)),
                          key=lambda row: (row.created_at, row.id), reverse=True)[:limit]
            return [(row, dict(collections.Counter(str(node.state) for node in self.nodes(row.id))))
                    for row in rows]

    def _change(self, task_id: str, **values: Any) -> Node:
        node = self.node_rows[task_id] = dataclasses.replace(self.node_rows[task_id], **values)
        return node

    def _change_in(self, states: tuple[str, ...], task_id: str, **values: Any) -> Optional[Node]:
        """The node as it was, changed by ``values`` if it is in one of ``states``."""
        node = self.node_rows.get(task_id)
        if node is None or node.state not in states:
            return None
        self._change(task_id, **values)
        return node

    # --- the steps of a transaction (kale.store.workflows.WorkflowSteps) -------------

    def add(self, workflow: WorkflowRow, nodes: Sequence[Node]) -> None:
        self.rows[workflow.id] = workflow
        for node in nodes:
            self.node_rows[node.task_id] = node

    def deadlines(self, task_ids: Sequence[str]) -> list[tuple[str, Optional[float]]]:
        ids = {self.node_rows[t].workflow_id for t in task_ids if t in self.node_rows}
        return [(w, self.rows[w].deadline_at) for w in sorted(ids) if w in self.rows]

    def succeed(self, task_id: str, result: str) -> Optional[tuple[str, list[str]]]:
        node = self._change_in((QUEUED,), task_id, state=NodeStatus.SUCCEEDED, result=result)
        return (node.workflow_id, list(node.downstream or ())) if node is not None else None

    def succeed_many(self, done: Sequence[tuple[str, str]]
                     ) -> dict[str, tuple[str, list[str]]]:
        return succeed_each(self, done)

    def succeed_cancelled(self, task_id: str, result: str) -> bool:
        return self._change_in((NodeStatus.CANCELLED,), task_id, state=NodeStatus.SUCCEEDED,
                               result=result, reason=None) is not None

    def arrive(self, task_id: str, count: int, now: float,
               claim: Claim) -> Optional[tuple[int, str]]:
        node = self.node_rows.get(task_id)
        if node is None:
            return None
        if node.missing == count and node.state == PENDING:
            node = self._change(task_id, missing=0, state=QUEUED, queued_at=now,
                                claimed_by=claim.owner, claimed_until=claim.until)
        else:
            node = self._change(task_id, missing=node.missing - count)
        return node.missing, node.state

    def node(self, task_id: str) -> Node:
        return self.node_rows[task_id]

    def results(self, task_ids: Sequence[str]) -> dict[str, Optional[str]]:
        return {t: self.node_rows[t].result for t in task_ids if t in self.node_rows}

    def all_succeeded(self, workflow_id: str) -> bool:
        return all(node.state == NodeStatus.SUCCEEDED for node in self.nodes(workflow_id))

    def finish(self, workflow_id: str, status: WorkflowStatus, now: float) -> None:
        row = self.rows.get(workflow_id)
        if row is not None and row.status == WorkflowStatus.RUNNING:
            self.rows[workflow_id] = dataclasses.replace(row, status=status, finished_at=now)

    def fail_queued(self, task_id: str, reason: str) -> Optional[str]:
        node = self._change_in((QUEUED,), task_id, state=NodeStatus.FAILED, reason=reason)
        return node.workflow_id if node is not None else None

    def status(self, workflow_id: str) -> Optional[tuple[str, Optional[float]]]:
        row = self.rows.get(workflow_id)
        return (row.status, row.deadline_at) if row is not None else None

    def nodes(self, workflow_id: str, lock: bool = False) -> list[Node]:
        with self.root.lock:            # held by the transaction, when in one
            return [node for node in self.node_rows.values() if node.workflow_id == workflow_id]

    def end_node(self, task_id: str, state: NodeStatus, reason: str) -> None:
        self._change_in((PENDING, QUEUED), task_id, state=state, reason=reason)

    def reopen(self, workflow_id: str, deadline_at: Optional[float]) -> bool:
        row = self.rows.get(workflow_id)
        if row is None or row.status not in (WorkflowStatus.FAILED, WorkflowStatus.CANCELLED):
            return False
        self.rows[workflow_id] = dataclasses.replace(row, status=WorkflowStatus.RUNNING,
                                                     finished_at=None, deadline_at=deadline_at)
        return True

    def reset_node(self, task_id: str, state: NodeStatus, missing: int, now: float,
                   claim: Claim) -> None:
        queued = state == QUEUED
        self._change(task_id, state=state, missing=missing, result=None, reason=None,
                     published=0, queued_at=now if queued else None,
                     claimed_by=claim.owner if queued else None,
                     claimed_until=claim.until if queued else None)

    def stranded(self, now: float, grace_sec: float, limit: int) -> list[str]:
        return [node.task_id for node in self.node_rows.values()
                if _lapsed(node, now, grace_sec)][:limit]

    def claim_stranded(self, task_id: str, now: float, grace_sec: float, claim: Claim) -> bool:
        node = self.node_rows.get(task_id)
        if node is None or not _lapsed(node, now, grace_sec):
            return False
        self._change(task_id, claimed_by=claim.owner, claimed_until=claim.until)
        return True


def _lapsed(node: Node, now: float, grace_sec: float) -> bool:
    """Whether a node is queued, unpublished, and its claim lapsed at ``now``
    (one without a claim: queued ``grace_sec`` before or earlier)."""
    if node.published or node.state != QUEUED:
        return False
    if node.claimed_until is not None:
        return node.claimed_until <= now
    return node.queued_at is not None and node.queued_at <= now - grace_sec
