"""A workflow's state in the task-records store: its nodes, inputs and results.

Each node's call and result are kept serialized and signed
(:mod:`kale.workflow.values`). :meth:`WorkflowState.complete`
is the one transaction that moves a workflow on: the node that succeeded
keeps its result, each downstream node's count of missing inputs goes
down, and a node left with none becomes ``queued`` and is returned, with
its upstream results in place, to be published by exactly one caller.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from sqlalchemy import and_, bindparam, case, func, select, update

from kale.records.store import RecordStore
from kale.statuses import FINAL_NODE, NodeStatus, WorkflowStatus
from kale.store.sql.schema import workflow_nodes as nodes_table
from kale.store.sql.schema import workflows as workflows_table
from kale.workflow.graph import Graph, resolve
from kale.workflow.values import Values, to_json

#: A node's states (:class:`kale.statuses.NodeStatus`). ``pending``: waiting
#: for inputs; ``queued``: published (or about to be); then final.
PENDING, QUEUED = NodeStatus.PENDING, NodeStatus.QUEUED
SUCCEEDED, FAILED, CANCELLED = NodeStatus.SUCCEEDED, NodeStatus.FAILED, NodeStatus.CANCELLED
FINAL = FINAL_NODE
#: A workflow's statuses (:class:`kale.statuses.WorkflowStatus`).
RUNNING = WorkflowStatus.RUNNING

#: The reason of the nodes a workflow past its deadline failed.
DEADLINE_EXCEEDED = 'deadline_exceeded'

#: complete()'s statements, built once (building one costs more than running it).
_WORKFLOWS_OF = select(workflows_table.c.id, workflows_table.c.deadline_at).select_from(
    workflows_table.join(nodes_table, nodes_table.c.workflow_id == workflows_table.c.id)).where(
    nodes_table.c.task_id.in_(bindparam('t', expanding=True))).distinct()
_SUCCEED = update(nodes_table).where(
    nodes_table.c.task_id == bindparam('t'), nodes_table.c.state == QUEUED).values(
    state=SUCCEEDED, result=bindparam('r')).returning(
    nodes_table.c.workflow_id, nodes_table.c.downstream)
_CLAIMS = and_(nodes_table.c.missing == bindparam('n'), nodes_table.c.state == PENDING)
_ARRIVE = update(nodes_table).where(nodes_table.c.task_id == bindparam('t')).values(
    missing=nodes_table.c.missing - bindparam('n'),
    state=case((_CLAIMS, QUEUED), else_=nodes_table.c.state),
    queued_at=case((_CLAIMS, bindparam('now')), else_=nodes_table.c.queued_at)).returning(
    nodes_table.c.missing, nodes_table.c.state)


class WorkflowState:
    """The workflow tables of one records store."""

    def __init__(self, store: RecordStore, values: Values):
        self.store = store
        self.values = values
        #: The published nodes the last :meth:`complete` failed for being
        #: past the workflow's deadline (their tasks are to be cancelled).
        self.expired: list[str] = []

    def record(self, workflow_id: str, graph: Graph, queues: Mapping[str, str],
               labels: Optional[Mapping[str, str]], deadline_at: Optional[float],
               now: float) -> None:
        """Every node, ``pending`` or (without inputs) ``queued``, in one transaction."""
        rows = []
        for node in graph.nodes.values():
            queue = queues[node.task_id]
            call = self.values.pack_call(node.task_id, node.name, queue,
                                         {'args': list(node.args), 'kwargs': node.kwargs,
                                          **node.wait})
            rows.append({'task_id': node.task_id, 'workflow_id': workflow_id, 'task': node.name,
                         'queue': queue, 'state': QUEUED if not node.upstream else PENDING,
                         'missing': len(node.upstream), 'upstream': list(node.upstream),
                         'downstream': list(node.downstream), 'call': call, 'result': None,
                         'published': 0, 'queued_at': None if node.upstream else now,
                         'reason': None})
        with self.store.begin(write=True) as conn:
            conn.execute(workflows_table.insert().values(
                id=workflow_id, status=RUNNING, labels=dict(labels or {}) or None,
                result=to_json(graph.result), created_at=now, deadline_at=deadline_at))
            conn.execute(nodes_table.insert(), rows)

    def complete(self, task_id: str, result: Any, now: float) -> list[dict[str, Any]]:
        """The node succeeded with ``result``: the nodes that now have all
        their inputs, each once, with its call resolved (``args``, ``kwargs``).
        A node that is not ``queued`` (a second delivery, a cancelled one)
        changes nothing. InvalidFlowError when the result cannot be kept."""
        return self.complete_many([(task_id, self.values.pack_result(task_id, result))], now)

    def complete_many(self, done: Sequence[tuple[str, str]], now: float) -> list[dict[str, Any]]:
        """:meth:`complete` for several nodes (a batch's), their results
        already packed (``Values.pack_result``), in one transaction: a node
        several of them feed has its count lowered once, by as many."""
        self.expired = []
        with self.store.begin(write=True) as conn:
            arrivals: dict[str, int] = {}
            sinks: set[str] = set()
            for workflow in conn.execute(_WORKFLOWS_OF, {'t': [t for t, _ in done]}).all():
                if workflow.deadline_at is not None:
                    self.expired += self._expire(conn, workflow.id, now)
            for task_id, stored in done:
                row = conn.execute(_SUCCEED, {'t': task_id, 'r': stored}).first()
                if row is None:          # not queued: a second delivery, a cancelled node
                    continue
                for later in row.downstream or ():
                    arrivals[later] = arrivals.get(later, 0) + 1
                if not row.downstream:   # the last node to succeed has no downstream
                    sinks.add(row.workflow_id)
            ready = []
            for later, count in arrivals.items():
                # One statement lowers the count and, at zero, claims the
                # node: the row's lock makes exactly one caller see zero.
                left = conn.execute(_ARRIVE, {'t': later, 'n': count, 'now': now}).first()
                if left is not None and left.missing == 0 and left.state == QUEUED:
                    ready.append(self._resolved(conn, later))
            for workflow_id in sinks:
                self._finish_if_done(conn, workflow_id, now)
            return ready

    def _resolved(self, conn: Any, task_id: str) -> dict[str, Any]:
        node = conn.execute(select(nodes_table).where(nodes_table.c.task_id == task_id)).one()
        results = self.results(conn, node.upstream or ())
        call = self.values.unpack_call(node.task_id, node.task, node.queue, node.call)
        return {'task_id': node.task_id, 'task': node.task, 'queue': node.queue,
                'workflow_id': node.workflow_id,
                'args': tuple(resolve(call['args'], results)),
                'kwargs': resolve(call['kwargs'], results),
                'wait': {key: call[key] for key in ('delay_sec', 'eta') if key in call}}

    def results(self, conn: Any, task_ids: Sequence[str]) -> dict[str, Any]:
        """The results of these succeeded nodes, checked and deserialized."""
        return {row.task_id: self.values.unpack_result(row.task_id, row.result)
                for row in conn.execute(select(nodes_table.c.task_id, nodes_table.c.result).where(
                    nodes_table.c.task_id.in_(list(task_ids)))).all()}

    def _finish_if_done(self, conn: Any, workflow_id: str, now: float) -> None:
        unfinished = conn.execute(select(nodes_table.c.task_id).where(
            nodes_table.c.workflow_id == workflow_id,
            nodes_table.c.state != SUCCEEDED).limit(1)).first()
        if unfinished is None:
            conn.execute(update(workflows_table).where(
                workflows_table.c.id == workflow_id, workflows_table.c.status == RUNNING).values(
                status=WorkflowStatus.SUCCEEDED, finished_at=now))

    def fail(self, task_id: str, reason: str, now: float) -> list[str]:
        """The node failed for good: every node downstream of it fails
        (``upstream_failed``), every unfinished node that only fed failed
        nodes is cancelled, and the workflow fails. Returns the published
        nodes this cancelled or failed, whose tasks are to be cancelled."""
        with self.store.begin(write=True) as conn:
            failed = conn.execute(update(nodes_table).where(
                nodes_table.c.task_id == task_id, nodes_table.c.state == QUEUED).values(
                state=FAILED, reason=reason[:2000]))
            if failed.rowcount != 1:
                return []
            workflow_id = conn.execute(select(nodes_table.c.workflow_id).where(
                nodes_table.c.task_id == task_id)).scalar_one()
            ended = self._end(conn, workflow_id, WorkflowStatus.FAILED, now,
                              first_failed=task_id)
            return ended

    def expire(self, workflow_id: str, now: float) -> list[str]:
        """A running workflow past its deadline fails its unfinished nodes
        (``deadline_exceeded``); returns the published ones, as :meth:`fail` does."""
        with self.store.begin(write=True) as conn:
            return self._expire(conn, workflow_id, now)

    def _expire(self, conn: Any, workflow_id: str, now: float) -> list[str]:
        row = conn.execute(select(workflows_table.c.status, workflows_table.c.deadline_at).where(
            workflows_table.c.id == workflow_id)).one_or_none()
        if row is None or row.status != RUNNING or row.deadline_at is None or \
                now <= row.deadline_at:
            return []
        return self._end(conn, workflow_id, WorkflowStatus.FAILED, now)

    def cancel(self, workflow_id: str, now: float) -> list[str]:
        """Cancel every node that is not final, and the workflow; returns the
        published nodes cancelled (their tasks are to be cancelled too)."""
        with self.store.begin(write=True) as conn:
            return self._end(conn, workflow_id, WorkflowStatus.CANCELLED, now)

    def _end(self, conn: Any, workflow_id: str, status: WorkflowStatus, now: float,
             first_failed: Optional[str] = None) -> list[str]:
        rows = {row.task_id: row for row in conn.execute(select(
            nodes_table.c.task_id, nodes_table.c.state, nodes_table.c.downstream,
            nodes_table.c.published).where(nodes_table.c.workflow_id == workflow_id)).all()}
        states = {task_id: row.state for task_id, row in rows.items()}
        reasons: dict[str, str] = {}
        if first_failed is not None:
            later = list(rows[first_failed].downstream or ())
            while later:                         # everything downstream fails
                node = later.pop()
                if states[node] not in FINAL:
                    states[node], reasons[node] = FAILED, 'upstream_failed'
                    later.extend(rows[node].downstream or ())
            changed = True
            while changed:                       # what only fed failed nodes is useless
                changed = False
                for node, row in rows.items():
                    downstream = row.downstream or ()
                    if states[node] not in FINAL and downstream and all(
                            states[d] in (FAILED, CANCELLED) for d in downstream):
                        states[node], reasons[node] = CANCELLED, 'not needed: upstream_failed'
                        changed = True
        else:
            ending, reason = (FAILED, DEADLINE_EXCEEDED) if status is WorkflowStatus.FAILED \
                else (CANCELLED, 'workflow cancelled')
            for node in rows:
                if states[node] not in FINAL:
                    states[node], reasons[node] = ending, reason
        for node, reason in reasons.items():
            conn.execute(update(nodes_table).where(
                nodes_table.c.task_id == node, nodes_table.c.state.in_((PENDING, QUEUED))).values(
                state=states[node], reason=reason))
        conn.execute(update(workflows_table).where(
            workflows_table.c.id == workflow_id, workflows_table.c.status == RUNNING).values(
            status=status, finished_at=now))
        return [node for node in reasons if rows[node].published]

    def stranded(self, now: float, grace_sec: float, limit: int = 100) -> list[dict[str, Any]]:
        """Nodes ready to run for over ``grace_sec`` but never published (the
        process that made them ready died first), each claimed by moving its
        ``queued_at`` to ``now`` (another sweep leaves it alone for as long),
        with its call resolved: to be published by the caller."""
        query = select(nodes_table.c.task_id, nodes_table.c.queued_at).where(
            nodes_table.c.published == 0, nodes_table.c.state == QUEUED,
            nodes_table.c.queued_at <= now - grace_sec).limit(limit)
        with self.store.begin() as conn:       # most sweeps find nothing: no write lock
            if conn.execute(query).first() is None:
                return []
        with self.store.begin(write=True) as conn:
            found = conn.execute(query).all()
            claimed = []
            for task_id, queued_at in found:
                if conn.execute(update(nodes_table).where(
                        nodes_table.c.task_id == task_id, nodes_table.c.published == 0,
                        nodes_table.c.queued_at == queued_at).values(queued_at=now)).rowcount:
                    claimed.append(self._resolved(conn, task_id))
            return claimed

    def overdue(self, now: float, limit: int = 100) -> list[str]:
        """Running workflows past their deadline."""
        with self.store.begin() as conn:
            return [workflow_id for (workflow_id,) in conn.execute(
                select(workflows_table.c.id).where(
                    workflows_table.c.status == RUNNING,
                    workflows_table.c.deadline_at < now).limit(limit)).all()]

    def mark_published(self, task_ids: Sequence[str]) -> None:
        with self.store.begin(write=True) as conn:
            conn.execute(update(nodes_table).where(nodes_table.c.task_id.in_(list(task_ids)))
                         .values(published=1))

    def workflow(self, workflow_id: str) -> Optional[Any]:
        with self.store.begin() as conn:
            return conn.execute(select(workflows_table).where(
                workflows_table.c.id == workflow_id)).one_or_none()

    def nodes(self, workflow_id: str) -> list[Any]:
        with self.store.begin() as conn:
            return list(conn.execute(select(nodes_table).where(
                nodes_table.c.workflow_id == workflow_id)).all())

    def workflows(self, status: Optional[str] = None, limit: int = 50,
                  before: Optional[float] = None) -> list[tuple[Any, dict[str, int]]]:
        """Up to ``limit`` workflows, newest first (created before ``before``
        when given), each with its count of nodes by state."""
        query = select(workflows_table).order_by(workflows_table.c.created_at.desc(),
                                                 workflows_table.c.id.desc()).limit(limit)
        if status is not None:
            query = query.where(workflows_table.c.status == status)
        if before is not None:
            query = query.where(workflows_table.c.created_at < before)
        with self.store.begin() as conn:
            rows = list(conn.execute(query).all())
            counts: dict[str, dict[str, int]] = {row.id: {} for row in rows}
            if rows:
                for workflow_id, state, count in conn.execute(
                        select(nodes_table.c.workflow_id, nodes_table.c.state, func.count())
                        .where(nodes_table.c.workflow_id.in_(list(counts)))
                        .group_by(nodes_table.c.workflow_id, nodes_table.c.state)).all():
                    counts[workflow_id][state] = int(count)
        return [(row, counts[row.id]) for row in rows]
