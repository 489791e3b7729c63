"""Submitting a flow, moving it on as its nodes succeed, sweeping the workflows
from each worker, and following them; why a node's end moves its workflow before
its message is deleted: docs/explanation/internals-workflow.md, "Submitting and moving on"."""
from __future__ import annotations

import collections
import contextlib
import datetime
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence

from kale import records
from kale.clock import SYSTEM_CLOCK, Clock
from kale.default import default_app
from kale.events import Outcome, Settlement
from kale.exceptions import (
    InvalidFlowError,
    KaleError,
    RecordsError,
    WorkflowError,
    WorkflowFailed,
    WorkflowNotFoundError,
)
from kale.hooks import PublishHooks, WorkerHooks
from kale.ids import random_id
from kale.records.recorder import OWN_WRITES_SEC
from kale.statuses import FINAL_TASK, TaskStatus, WorkflowStatus, status_values
from kale.store.record import TaskRecord, iso
from kale.workflow.flow import Part
from kale.workflow.graph import Graph, resolve
from kale.workflow.state import FAILED, Holding, WorkflowState, keeper
from kale.workflow.values import from_json, values

if TYPE_CHECKING:
    from kale.app import App

#: The sweep every worker makes of the workflows logs under its own name.
sweep_logger = logging.getLogger('kale.workflow.sweep')
#: The key of a node message's context that names its workflow.
WORKFLOW_CONTEXT = 'kale_workflow'
#: Nodes sent by one publish call: one SendMessageBatch request.
SEND_CHUNK = 10
#: The nodes a publish sent are marked published once this many are unmarked,
#: or this many seconds after the last mark, and at its end.
MARK_EVERY, MARK_EVERY_SEC = 100, 0.25


def _state(app: 'App') -> WorkflowState:
    if not app.config.RECORDS_URL:
        raise WorkflowError('workflows keep their state in the task records: set RECORDS_URL '
                            '(sqlite:///... on one machine, postgresql://... for a fleet)')
    return WorkflowState(app.store.workflows, values(app), keeper(app))


def submit(flow: Part, labels: Optional[dict[str, str]] = None,
           deadline_sec: Optional[float] = None, clock: Clock = SYSTEM_CLOCK,
           app: Optional['App'] = None) -> 'Workflow':
    """Check ``flow`` (InvalidFlowError), record it in ``app``'s records (by
    default the default app's), publish the nodes that need no input;
    returns its :class:`Workflow`."""
    app = app or default_app()
    state = _state(app)
    graph = Graph.build(flow, app.config)
    publisher = app.publisher
    queues = {node.task_id: publisher.queue_of(node.task_class, node.queue).name
              for node in graph.nodes.values()}
    now = clock.time()
    workflow_id = random_id()
    state.record(workflow_id, graph, queues, labels,
                 now + deadline_sec if deadline_sec is not None else None, now)
    roots = [{'task_id': node.task_id, 'task': node.name, 'queue': queues[node.task_id],
              'workflow_id': workflow_id, 'args': node.args, 'kwargs': node.kwargs,
              'wait': node.wait} for node in graph.roots()]
    publish_nodes(state, roots, app)
    return Workflow(workflow_id, app)


def publish_nodes(state: WorkflowState, ready: list[dict[str, Any]], app: 'App',
                  requeue: bool = False) -> None:
    """Publish nodes that have all their inputs, a batch per task, queue and
    delay, under the claims this process took when it made them ready; with
    ``requeue`` (a retry's, a sweep's) their records are ``queued`` again first
    (both: the docs page the module names, "Publish claims")."""
    if ready:
        with state.claims.holding(state.store, [node['task_id'] for node in ready]) as held:
            if requeue:
                requeue_records(ready, app)
            send_nodes(state, ready, app, held)


def send_nodes(state: WorkflowState, ready: list[dict[str, Any]], app: 'App',
               held: Holding) -> None:
    """:func:`publish_nodes`, inside the ``held`` claims of the nodes: those
    a sweep took over are not sent."""
    clock = state.claims.clock
    sent: list[str] = []
    marked_at = clock.monotonic()
    try:
        for key, chunk in _chunks(ready):
            batch = [node for node in chunk if node['task_id'] not in held.lost]
            if not batch:
                continue
            _send(app, key, batch)
            sent += [node['task_id'] for node in batch]
            if len(sent) >= MARK_EVERY or clock.monotonic() - marked_at >= MARK_EVERY_SEC:
                _mark(state, held, sent)
                marked_at = clock.monotonic()
    finally:                        # what was sent is marked, even when a later send raised
        _mark(state, held, sent)


def _chunks(ready: list[dict[str, Any]]) -> Iterator[tuple[tuple, list[dict[str, Any]]]]:
    """The nodes by task, queue, workflow and delay, SEND_CHUNK at a time."""
    batches: dict[tuple, list[dict[str, Any]]] = collections.defaultdict(list)
    for node in ready:
        wait = node.get('wait') or {}
        batches[(node['task'], node['queue'], node['workflow_id'], wait.get('delay_sec', 0),
                 wait.get('eta'))].append(node)
    for key, nodes in batches.items():
        for start in range(0, len(nodes), SEND_CHUNK):
            yield key, nodes[start:start + SEND_CHUNK]


def _send(app: 'App', key: tuple, batch: list[dict[str, Any]]) -> None:
    task, queue, workflow_id, delay_sec, eta = key
    runs_before = [node.get('retry_num', 0) for node in batch]
    app.publisher.publish_batch(
        app.registry.resolve(task), None, [(node['args'], node['kwargs']) for node in batch],
        queue_name=queue, task_ids=[node['task_id'] for node in batch],
        context={WORKFLOW_CONTEXT: workflow_id}, delay_sec=delay_sec,
        eta=None if eta is None else datetime.datetime.fromtimestamp(eta, datetime.timezone.utc),
        retry_nums=runs_before if any(runs_before) else None)


def _mark(state: WorkflowState, held: Holding, sent: list[str]) -> None:
    """The nodes in ``sent`` were sent: mark them published (emptying ``sent``)."""
    if sent:
        state.mark_published(sent)
        held.sent(sent)
        sent.clear()


def requeue_records(ready: list[dict[str, Any]], app: 'App') -> None:
    """Before nodes run again: the record of each that ended unsuccessfully
    starts a new life, ``queued`` (the docs page the module names, "Retrying
    a workflow")."""
    app.recorder.flush_process()                    # this process's own writes first
    store = app.recorder.store
    now = time.time()
    queued, history = [], []
    for node in ready:
        row = store.records.get(node['task_id'])
        record = TaskRecord.from_row(row, store.sealer) if row is not None else None
        if record is None or record.status not in _ENDED_UNSUCCESSFULLY:
            continue                        # never published, or not ended
        node['retry_num'] = record.attempts or 0
        queued.append({'id': record.id, 'task': node['task'], 'queue': node['queue'],
                       'status': TaskStatus.QUEUED, 'attempts': record.attempts or 0,
                       'published_at': now, 'updated_at': now})
        if record.started_at is not None and record.attempts:
            history.append(_last_attempt(record))
    if queued:
        store.records.write(queued, [], [], history)


#: The task statuses a record may start a new life from.
_ENDED_UNSUCCESSFULLY = tuple(status for status in FINAL_TASK if status != TaskStatus.SUCCEEDED)


def _last_attempt(record: TaskRecord) -> dict[str, Any]:
    fields = ('status', 'started_at', 'finished_at', 'duration_sec', 'worker', 'error_type',
              'error_message')
    return dict({name: getattr(record, name) for name in fields}, task_id=record.id,
                attempt=record.attempts)


class WorkflowHooks(PublishHooks, WorkerHooks):
    """Moves a workflow on when one of its nodes ends, and sweeps the
    workflows from each worker (loaded with RECORDS_URL set)."""

    def __init__(self, app: 'App', clock: Clock = SYSTEM_CLOCK) -> None:
        self.app = app
        self.clock = clock
        self._stop = threading.Event()
        self._sweeper: Optional[threading.Thread] = None

    @classmethod
    def for_app(cls, app: 'App') -> 'WorkflowHooks':
        return cls(app)

    def on_worker_startup(self, worker: Any) -> None:
        self.clock = getattr(worker, 'clock', SYSTEM_CLOCK)
        self._stop = threading.Event()
        self._sweeper = threading.Thread(target=self._sweep_until_stopped,
                                         name='kale-workflow-sweep', daemon=True)
        self._sweeper.start()

    def on_worker_shutdown(self, worker: Any) -> None:
        self._stop.set()
        if self._sweeper is not None:
            self._sweeper.join(10)
            self._sweeper = None

    def _sweep_until_stopped(self) -> None:
        while not self._stop.wait(float(self.app.config.WORKFLOW_SWEEP_SEC)):
            try:
                self.sweep()
            except KaleError as exc:         # the store or SQS is down: the next sweep tries again
                sweep_logger.warning('workflow sweep failed: %s', exc)

    def sweep(self) -> tuple[int, int]:
        """One sweep (the docs page the module names, "The sweep"): (nodes
        published, workflows failed for their deadline)."""
        app = self.app
        state, now = _state(app), self.clock.time()
        stranded = state.stranded(now, float(app.config.WORKFLOW_PUBLISH_GRACE_SEC))
        if stranded:
            sweep_logger.info('publishing %d workflow nodes left unpublished (their publisher\'s '
                              'claim lapsed): %s', len(stranded),
                              ' '.join(node['task_id'] for node in stranded[:20]))
            publish_nodes(state, stranded, app, requeue=True)
        overdue = state.overdue(now)
        for workflow_id in overdue:
            sweep_logger.info('workflow %s is past its deadline: failing its unfinished nodes',
                              workflow_id)
            _cancel_tasks(state.expire(workflow_id, now), app)
        return len(stranded), len(overdue)

    def before_settle(self, queue: Any, batch: Any) -> None:
        """Move on the workflows of the batch's nodes that ended, before their
        messages are deleted; the batch's successes in one transaction."""
        ended = [s for s in batch.settlements   # a node's dead run is no node of its own
                 if s.message is not None and s.outcome in (Outcome.SUCCEEDED, Outcome.DEAD_LETTER)
                 and s.message.context.get(WORKFLOW_CONTEXT) and not s.message.dead_of]
        if ended:
            advance(ended, self.app, self.clock)


def advance(ended: Sequence[Settlement], app: 'App', clock: Clock = SYSTEM_CLOCK) -> None:
    """Move the workflows of nodes that succeeded or failed for good."""
    state = _state(app)
    now = clock.time()
    done = []
    for settlement in ended:
        task_id, reason = settlement.task_id, settlement.reason or 'failed'
        if settlement.outcome is Outcome.SUCCEEDED:
            try:
                done.append((task_id, state.values.pack_result(task_id, settlement.result)))
                continue
            except InvalidFlowError as exc:     # a result that cannot be kept: the node fails
                reason = str(exc)
        _cancel_tasks(state.fail(task_id, reason, now), app=app)
    if done:
        ready = state.complete_many(done, now)
        publish_nodes(state, ready, app)
        _cancel_tasks(state.expired, app=app)


def _cancel_tasks(task_ids: list[str], app: 'App') -> None:
    """Cancel the tasks of published nodes a workflow no longer needs (a worker
    deletes them unrun; one that already runs has its result thrown away)."""
    for task_id in task_ids:
        with contextlib.suppress(RecordsError):          # running or finished meanwhile
            records.cancel(task_id, app=app)


def cancel(workflow_id: str, app: Optional['App'] = None) -> 'Workflow':
    """Cancel every node of the workflow that is not final, and the workflow."""
    workflow = get(workflow_id, app)
    _cancel_tasks(_state(workflow.app).cancel(workflow_id, time.time()), workflow.app)
    return workflow


def retry(workflow_id: str, app: Optional['App'] = None,
          clock: Clock = SYSTEM_CLOCK) -> 'Workflow':
    """Run the failed or cancelled workflow ``workflow_id`` again: its nodes
    that failed, were cancelled or never ran run again, each join once all
    its inputs succeeded; nodes that succeeded keep their results. A
    deadline counts again from now, the same span as at submit. Each node
    keeps its task id: its record starts a new life (:func:`requeue_records`).
    Returns the workflow (``running``); WorkflowNotFoundError for an unknown
    id, WorkflowConflictError for one running or succeeded."""
    workflow = get(workflow_id, app)
    state, row, now = _state(workflow.app), workflow._row(), clock.time()
    deadline_at = now + (row.deadline_at - row.created_at) if row.deadline_at is not None else None
    ready = state.retry(workflow.id, deadline_at, now)
    publish_nodes(state, ready, workflow.app, requeue=True)
    if ready:
        workflow.app.recorder.flush(timeout=OWN_WRITES_SEC)
    return workflow


class Workflow:
    """A submitted workflow, from any process: ``workflow.get(id)``."""

    def __init__(self, workflow_id: str, app: Optional['App'] = None):
        self.id = workflow_id
        #: The app whose records keep it.
        self.app = app or default_app()

    def _row(self) -> Any:
        row = _state(self.app).store.workflow(self.id)
        if row is None:
            raise WorkflowNotFoundError('no workflow %s in the task records' % self.id[:200])
        return row

    def status(self) -> WorkflowStatus:
        """``running``, ``succeeded``, ``failed`` or ``cancelled``. A running
        workflow past its deadline fails here, if no node's end failed it first."""
        row = self._row()
        if row.status == WorkflowStatus.RUNNING and row.deadline_at is not None and \
                time.time() > row.deadline_at:
            _cancel_tasks(_state(self.app).expire(self.id, time.time()), self.app)
            row = self._row()
        return WorkflowStatus(row.status)

    def describe(self) -> dict[str, Any]:
        """The workflow as JSON-ready data: its fields, each node (task id,
        task, state, queue, upstream and downstream ids, reason, whether
        published) and its edges ``[from, to]``."""
        self.status()                       # a deadline past moves it on first
        nodes = _state(self.app).store.nodes(self.id)
        counts = dict(collections.Counter(str(row.state) for row in nodes))
        return dict(_summary(self._row(), counts), nodes=[dict(
            _node(row), downstream=list(row.downstream or ()), reason=row.reason,
            published=bool(row.published)) for row in nodes],
            edges=[[upstream, row.task_id] for row in nodes for upstream in row.upstream or ()])

    def nodes(self) -> list[dict[str, Any]]:
        """Each node's task id, task, state, queue and upstream ids."""
        return [_node(row) for row in _state(self.app).store.nodes(self.id)]

    def wait(self, timeout: float, poll_sec: float = 0.1) -> WorkflowStatus:
        """Wait until the workflow is final; its status (WorkflowError on timeout)."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.status()
            if status is not WorkflowStatus.RUNNING:
                return status
            if time.monotonic() >= deadline:
                raise WorkflowError('workflow %s still %s after %gs' % (self.id, status, timeout))
            time.sleep(poll_sec)

    def result(self, timeout: Optional[float] = None) -> Any:
        """What the flow gives (its last node's result, a group's list), once
        it succeeded; WorkflowError if it did not."""
        status = self.wait(timeout) if timeout is not None else self.status()
        if status is WorkflowStatus.FAILED:
            raise self._failure()
        if status is not WorkflowStatus.SUCCEEDED:
            raise WorkflowError('workflow %s is %s, it has no result' % (self.id, status))
        state = _state(self.app)
        results = state.results([row.task_id for row in state.store.nodes(self.id)])
        return resolve(from_json(self._row().result), results)

    def _failure(self) -> WorkflowFailed:
        """Why the workflow failed: its first node that failed of itself (not
        for its upstream), and that node's reason."""
        failed = [(row.task_id, row.task, row.reason) for row in _state(self.app).store.nodes(self.id)
                  if row.state == FAILED and row.reason != 'upstream_failed']
        return WorkflowFailed('workflow %s failed: node %s (%s): %s'
                              % (self.id, *(failed[0] if failed else ('?', '?', 'unknown'))))


def _node(row: Any) -> dict[str, Any]:
    return {'task_id': row.task_id, 'task': row.task, 'state': row.state, 'queue': row.queue,
            'upstream': list(row.upstream or ())}


def _summary(row: Any, counts: dict[str, int]) -> dict[str, Any]:
    return {'id': row.id, 'status': row.status, 'labels': row.labels or {},
            'created_at': iso(row.created_at), 'deadline_at': iso(row.deadline_at),
            'finished_at': iso(row.finished_at), 'node_count': sum(counts.values()),
            'node_states': counts}


def list_workflows(status: Optional[str] = None, limit: int = 50, before: Optional[float] = None,
                   app: Optional['App'] = None) -> list[dict[str, Any]]:
    """Up to ``limit`` workflows, newest first, as JSON-ready summaries
    (``status`` one of running, succeeded, failed, cancelled, or None for all;
    ``before``: created before that epoch time, to page on)."""
    if status is not None and status not in status_values(WorkflowStatus):
        raise WorkflowError('workflow status must be one of %s, got %r'
                            % (', '.join(status_values(WorkflowStatus)), status[:100]))
    if not 1 <= limit <= 1000:
        raise WorkflowError('limit must be from 1 to 1000, got %r' % limit)
    return [_summary(row, counts) for row, counts in
            _state(app or default_app()).store.workflows(status, limit, before)]


def get(workflow_id: str, app: Optional['App'] = None) -> Workflow:
    """The workflow ``workflow_id`` (WorkflowError when there is none)."""
    workflow = Workflow(workflow_id, app)
    workflow._row()
    return workflow
