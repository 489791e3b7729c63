"""The workflows' facet on a database (see :mod:`kale.store.workflows`):
``kale_workflows`` and ``kale_workflow_nodes``, a node's arrival counted and
claimed in one UPDATE (docs/explanation/internals-store.md, "Workflows")."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional, Sequence

from sqlalchemy import and_, bindparam, case, func, or_, select, text, update

from kale.statuses import NodeStatus, WorkflowStatus
from kale.store.sql.records import OnStore
from kale.store.sql.schema import workflow_nodes as nodes_table
from kale.store.sql.schema import workflows as workflows_table
from kale.store.workflows import NODE_FIELDS, WORKFLOW_FIELDS, Claim, Node, WorkflowRow, succeed_each

PENDING, QUEUED = NodeStatus.PENDING, NodeStatus.QUEUED

_DEADLINES = select(workflows_table.c.id, workflows_table.c.deadline_at).select_from(
    workflows_table.join(nodes_table, nodes_table.c.workflow_id == workflows_table.c.id)).where(
    nodes_table.c.task_id.in_(bindparam('t', expanding=True))).distinct()
_SUCCEED = update(nodes_table).where(
    nodes_table.c.task_id == bindparam('t'), nodes_table.c.state == QUEUED).values(
    state=NodeStatus.SUCCEEDED, result=bindparam('r')).returning(
    nodes_table.c.workflow_id, nodes_table.c.downstream)
_SUCCEED_MANY = text(
    'UPDATE kale_workflow_nodes AS n SET state = :succeeded, result = d.r '
    'FROM unnest(CAST(:ids AS VARCHAR[]), CAST(:results AS TEXT[])) AS d(t, r) '
    'WHERE n.task_id = d.t AND n.state = :queued '
    'RETURNING n.task_id, n.workflow_id, n.downstream').columns(
    nodes_table.c.task_id, nodes_table.c.workflow_id, nodes_table.c.downstream)
_CLAIMS = and_(nodes_table.c.missing == bindparam('n'), nodes_table.c.state == PENDING)
_ARRIVE = update(nodes_table).where(nodes_table.c.task_id == bindparam('t')).values(
    missing=nodes_table.c.missing - bindparam('n'),
    state=case((_CLAIMS, QUEUED), else_=nodes_table.c.state),
    queued_at=case((_CLAIMS, bindparam('now')), else_=nodes_table.c.queued_at),
    claimed_by=case((_CLAIMS, bindparam('owner')), else_=nodes_table.c.claimed_by),
    claimed_until=case((_CLAIMS, bindparam('until')), else_=nodes_table.c.claimed_until)
).returning(nodes_table.c.missing, nodes_table.c.state)
#: A node queued and unpublished whose claim lapsed (one without a claim,
#: left by a Kale from before claims: queued a grace ago or earlier).
_LAPSED = and_(nodes_table.c.published == 0, nodes_table.c.state == QUEUED, or_(
    nodes_table.c.claimed_until <= bindparam('now'),
    and_(nodes_table.c.claimed_until.is_(None), nodes_table.c.queued_at <= bindparam('before'))))
_STRANDED = select(nodes_table.c.task_id).where(_LAPSED).limit(bindparam('limit'))
_TAKE_OVER = update(nodes_table).where(nodes_table.c.task_id == bindparam('t'), _LAPSED).values(
    claimed_by=bindparam('owner'), claimed_until=bindparam('until'))
_RENEW = update(nodes_table).where(
    nodes_table.c.task_id.in_(bindparam('ids', expanding=True)),
    nodes_table.c.claimed_by == bindparam('owner')).values(
    claimed_until=bindparam('until')).returning(nodes_table.c.task_id)
_NODE = select(nodes_table).where(nodes_table.c.task_id == bindparam('t'))
_UNFINISHED = select(nodes_table.c.task_id).where(
    nodes_table.c.workflow_id == bindparam('w'),
    nodes_table.c.state != NodeStatus.SUCCEEDED).limit(1)


class SQLWorkflows(OnStore):
    """Workflows and their nodes on a database."""

    @contextlib.contextmanager
    def begin(self, write: bool = False) -> Iterator['_Steps']:
        with self.store.begin(write=write) as conn:
            yield _Steps(conn)

    def mark_published(self, task_ids: Sequence[str]) -> None:
        self.store.changed(update(nodes_table).where(nodes_table.c.task_id.in_(list(task_ids)))
                           .values(published=1))

    def renew_claims(self, task_ids: Sequence[str], owner: str, until: float) -> list[str]:
        if not task_ids:
            return []
        with self.store.begin(write=True) as conn:
            return [row[0] for row in conn.execute(_RENEW, {'ids': list(task_ids),
                                                            'owner': owner, 'until': until})]

    def overdue(self, now: float, limit: int = 100) -> list[str]:
        return [workflow_id for (workflow_id,) in self.store.read(select(workflows_table.c.id).where(
            workflows_table.c.status == WorkflowStatus.RUNNING,
            workflows_table.c.deadline_at < now).limit(limit))]

    def workflow(self, workflow_id: str) -> Optional[WorkflowRow]:
        found = self.store.read(select(workflows_table).where(workflows_table.c.id == workflow_id))
        return WorkflowRow(*found[0]) if found else None     # its fields are the columns

    def nodes(self, workflow_id: str) -> list[Node]:
        with self.store.begin() as conn:
            return _Steps(conn).nodes(workflow_id)

    def workflows(self, status: Optional[str] = None, limit: int = 50,
                  before: Optional[float] = None) -> list[tuple[WorkflowRow, dict[str, int]]]:
        query = select(workflows_table).order_by(workflows_table.c.created_at.desc(),
                                                 workflows_table.c.id.desc()).limit(limit)
        if status is not None:
            query = query.where(workflows_table.c.status == status)
        if before is not None:
            query = query.where(workflows_table.c.created_at < before)
        with self.store.begin() as conn:
            rows = [WorkflowRow(*row) for row in conn.execute(query).all()]
            counts: dict[str, dict[str, int]] = {row.id: {} for row in rows}
            if rows:
                for workflow_id, state, count in conn.execute(
                        select(nodes_table.c.workflow_id, nodes_table.c.state, func.count())
                        .where(nodes_table.c.workflow_id.in_(list(counts)))
                        .group_by(nodes_table.c.workflow_id, nodes_table.c.state)).all():
                    counts[workflow_id][state] = int(count)
        return [(row, counts[row.id]) for row in rows]


class _Steps:
    """:class:`kale.store.workflows.WorkflowSteps` as statements on one connection."""

    def __init__(self, conn: Any):
        self.conn = conn

    def add(self, workflow: WorkflowRow, nodes: Sequence[Node]) -> None:
        self.conn.execute(workflows_table.insert().values(
            **{name: getattr(workflow, name) for name in WORKFLOW_FIELDS}))
        self.conn.execute(nodes_table.insert(), [
            {name: getattr(node, name) for name in NODE_FIELDS} for node in nodes])

    def deadlines(self, task_ids: Sequence[str]) -> list[tuple[str, Optional[float]]]:
        return [(row[0], row[1]) for row in self.conn.execute(_DEADLINES, {'t': list(task_ids)})]

    def succeed(self, task_id: str, result: str) -> Optional[tuple[str, list[str]]]:
        row = self.conn.execute(_SUCCEED, {'t': task_id, 'r': result}).first()
        return (row.workflow_id, list(row.downstream or ())) if row is not None else None

    def succeed_many(self, done: Sequence[tuple[str, str]]
                     ) -> dict[str, tuple[str, list[str]]]:
        if self.conn.dialect.name != 'postgresql':
            return succeed_each(self, done)
        return {row.task_id: (row.workflow_id, list(row.downstream or ()))
                for row in self.conn.execute(_SUCCEED_MANY, {
                    'ids': [task_id for task_id, _ in done],
                    'results': [result for _, result in done],
                    'succeeded': NodeStatus.SUCCEEDED, 'queued': QUEUED})}

    def succeed_cancelled(self, task_id: str, result: str) -> bool:
        return bool(self.conn.execute(update(nodes_table).where(
            nodes_table.c.task_id == task_id, nodes_table.c.state == NodeStatus.CANCELLED).values(
            state=NodeStatus.SUCCEEDED, result=result, reason=None)).rowcount)

    def arrive(self, task_id: str, count: int, now: float,
               claim: Claim) -> Optional[tuple[int, str]]:
        row = self.conn.execute(_ARRIVE, {'t': task_id, 'n': count, 'now': now,
                                          'owner': claim.owner, 'until': claim.until}).first()
        return (row.missing, row.state) if row is not None else None

    def node(self, task_id: str) -> Node:
        return Node(*self.conn.execute(_NODE, {'t': task_id}).one())   # its fields are the columns

    def results(self, task_ids: Sequence[str]) -> dict[str, Optional[str]]:
        return {row.task_id: row.result for row in self.conn.execute(
            select(nodes_table.c.task_id, nodes_table.c.result).where(
                nodes_table.c.task_id.in_(list(task_ids)))).all()}

    def all_succeeded(self, workflow_id: str) -> bool:
        return self.conn.execute(_UNFINISHED, {'w': workflow_id}).first() is None

    def finish(self, workflow_id: str, status: WorkflowStatus, now: float) -> None:
        self.conn.execute(update(workflows_table).where(
            workflows_table.c.id == workflow_id,
            workflows_table.c.status == WorkflowStatus.RUNNING).values(
            status=status, finished_at=now))

    def fail_queued(self, task_id: str, reason: str) -> Optional[str]:
        failed = self.conn.execute(update(nodes_table).where(
            nodes_table.c.task_id == task_id, nodes_table.c.state == QUEUED).values(
            state=NodeStatus.FAILED, reason=reason).returning(nodes_table.c.workflow_id)).first()
        return failed[0] if failed is not None else None

    def status(self, workflow_id: str) -> Optional[tuple[str, Optional[float]]]:
        row = self.conn.execute(select(workflows_table.c.status, workflows_table.c.deadline_at)
                                .where(workflows_table.c.id == workflow_id)).one_or_none()
        return (row[0], row[1]) if row is not None else None

    def nodes(self, workflow_id: str, lock: bool = False) -> list[Node]:
        query = select(nodes_table).where(nodes_table.c.workflow_id == workflow_id)
        if lock:
            query = query.order_by(nodes_table.c.task_id).with_for_update()
        return [Node(*row) for row in self.conn.execute(query).all()]

    def end_node(self, task_id: str, state: NodeStatus, reason: str) -> None:
        self.conn.execute(update(nodes_table).where(
            nodes_table.c.task_id == task_id, nodes_table.c.state.in_((PENDING, QUEUED))).values(
            state=state, reason=reason))

    def reopen(self, workflow_id: str, deadline_at: Optional[float]) -> bool:
        return bool(self.conn.execute(update(workflows_table).where(
            workflows_table.c.id == workflow_id,
            workflows_table.c.status.in_((WorkflowStatus.FAILED, WorkflowStatus.CANCELLED)))
            .values(status=WorkflowStatus.RUNNING, finished_at=None,
                    deadline_at=deadline_at)).rowcount)

    def reset_node(self, task_id: str, state: NodeStatus, missing: int, now: float,
                   claim: Claim) -> None:
        queued = state == QUEUED
        self.conn.execute(update(nodes_table).where(nodes_table.c.task_id == task_id).values(
            state=state, missing=missing, result=None, reason=None, published=0,
            queued_at=now if queued else None, claimed_by=claim.owner if queued else None,
            claimed_until=claim.until if queued else None))

    def stranded(self, now: float, grace_sec: float, limit: int) -> list[str]:
        return [row[0] for row in self.conn.execute(
            _STRANDED, {'now': now, 'before': now - grace_sec, 'limit': limit}).all()]

    def claim_stranded(self, task_id: str, now: float, grace_sec: float, claim: Claim) -> bool:
        return bool(self.conn.execute(_TAKE_OVER, {
            't': task_id, 'now': now, 'before': now - grace_sec, 'owner': claim.owner,
            'until': claim.until}).rowcount)
