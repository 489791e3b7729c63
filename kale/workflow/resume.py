"""Running a failed or cancelled workflow again: ``workflow.retry(id)``.

What did not succeed runs again; what succeeded keeps its result and does
not run again (:meth:`~kale.workflow.state.WorkflowState.retry`). Each
node keeps its task id, so its task record lives on: the record starts a
new life, its last attempt kept in its attempt history, and the node's
runs are numbered on from the ones before (``attempts`` grows). The records
are made ``queued`` before anything is published
(:func:`~kale.workflow.run.requeue_records`), the nodes' publish claims
held meanwhile (:mod:`kale.workflow.claims`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from kale.clock import SYSTEM_CLOCK, Clock
from kale.records.recorder import OWN_WRITES_SEC
from kale.workflow.run import Workflow, _state, get, publish_stranded

if TYPE_CHECKING:
    from kale.app import App


def retry(workflow_id: str, app: Optional['App'] = None,
          clock: Clock = SYSTEM_CLOCK) -> Workflow:
    """Run the failed or cancelled workflow ``workflow_id`` again: its nodes
    that failed, were cancelled or never ran run again, each join once all
    its inputs succeeded; nodes that succeeded keep their results. A
    deadline counts again from now, the same span as at submit. Returns
    the workflow (``running``); WorkflowNotFoundError for an unknown id,
    WorkflowConflictError for one running or succeeded."""
    workflow = get(workflow_id, app)
    state = _state(workflow.app)
    row = state.workflow(workflow.id)
    now = clock.time()
    deadline_at = now + (row.deadline_at - row.created_at) \
        if row is not None and row.deadline_at is not None else None
    ready = state.retry(workflow.id, deadline_at, now)
    publish_stranded(state, ready, workflow.app)
    if ready:
        workflow.app.recorder.flush(timeout=OWN_WRITES_SEC)
    return workflow

