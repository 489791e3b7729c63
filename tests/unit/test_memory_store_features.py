"""The features that keep rows, on the memory store (RECORDS_URL='memory://'),
end to end in one process: a task's record, a workflow moved on by the
worker and one retried, a concurrency limit, a record retried once."""
from __future__ import annotations

from kale import records, workflow
from kale import worker as kale_worker
from kale.app import App
from kale.records.hooks import RecordsHooks
from kale.statuses import TaskStatus, WorkflowStatus
from kale.store import open_store
from kale.store.memory import MemoryStore
from kale.transport.memory import MemoryTransport
from kale.workflow.run import WorkflowHooks
from tests import flow_tasks as ft
from tests import workflow_tasks as wt
from tests.support.clock import ShiftedClock
from tests.support.killed import Killable, kill
from tests.tasks import NonRetriableTask, RecordTask


def work(app):
    assert kale_worker.Worker(queue_names=['default'], burst=True, app=app).run() == 0


def memory_app(app, name):
    app = app.replace(RECORDS_URL='memory://%s' % name, RECORDS_SETTLE_WAIT_SEC=0)
    assert isinstance(records.store(app=app), MemoryStore)
    return app


def test_a_memory_url_opens_the_memory_store(app):
    assert isinstance(open_store('memory://x', app.config), MemoryStore)
    assert type(open_store('sqlite://', app.config)).__name__ == 'RecordStore'


def test_a_task_is_recorded_and_retried_once_on_memory(app, tmp_path):
    app = memory_app(app, 'records')
    done = app.publish(RecordTask, None, 1)
    failed = app.publish(NonRetriableTask, None)
    work(app)
    record = records.wait(done, 30, app=app)
    assert record.status == TaskStatus.SUCCEEDED and record.args == [1]
    assert records.wait(failed, 30, app=app).status == TaskStatus.FAILED
    again, published = records.retry_reporting(failed, app=app)
    assert published and records.retry_reporting(failed, app=app) == (again, False)
    assert records.queries(app=app).count(records.TaskFilter()) == 3


def test_a_workflow_moves_on_in_memory(app):
    app = memory_app(app, 'flows')
    flow = workflow.submit(workflow.chain(wt.Add.s(1, 2), wt.Add.s(10)), app=app)
    for _ in range(3):
        work(app)
    assert flow.status() == WorkflowStatus.SUCCEEDED
    assert flow.result() == 13


def test_a_failed_workflow_is_retried_in_memory(app):
    app = memory_app(app, 'retries')
    wt.RUNS.clear()
    wt.FAILING.add(2)
    try:
        flow = workflow.submit(workflow.chord(workflow.map(wt.Tally, [1, 2]), wt.TallyTotal.s()),
                               app=app)
        work(app)
        assert flow.status() == WorkflowStatus.FAILED
        wt.FAILING.clear()
        workflow.retry(flow.id, app=app)
        for _ in range(3):
            work(app)
        assert flow.result() == 6 and sorted(map(str, wt.RUNS)) == ['1', '2', '2', 'total']
    finally:
        wt.FAILING.clear()
        wt.RUNS.clear()


def test_a_concurrency_limit_holds_in_memory(app):
    app = memory_app(app, 'limits')
    ft.runs.clear()
    app.publish_batch(ft.OneAtATimeTask, None, [((n,), {}) for n in range(4)])
    for _ in range(6):
        work(app)
    assert ft.runs.most == 1 and sorted(item[0] for item in ft.runs.items) == [0, 1, 2, 3]


def test_a_workflow_moves_on_when_its_nodes_worker_dies_while_settling_it(app, monkeypatch):
    """A worker killed between moving a workflow on and writing its node's
    record: the node runs again and the workflow finishes. (Were the record
    written first, the redelivery would be deleted unrun as a duplicate, and
    the workflow would wait for good.)"""
    clock = ShiftedClock()
    config = app.config.replace(RECORDS_URL='memory://killed-settling', RECORDS_SETTLE_WAIT_SEC=5)
    transport = MemoryTransport(clock=clock)        # (its app: the first made below)
    flow = workflow.submit(workflow.chain(wt.Add.s(1, 2), wt.Add.s(10)),
                           app=App(config, transport=transport))
    first = []

    def killed_after_the_first(before_settle):
        def settling(self, queue, batch):
            if Killable.current.dead:
                return                  # a dead worker writes nothing more
            before_settle(self, queue, batch)
            if not first:
                first.append(type(self).__name__)
                kill()
        return settling
    for hooks in (RecordsHooks, WorkflowHooks):
        monkeypatch.setattr(hooks, 'before_settle', killed_after_the_first(hooks.before_settle))
    for _ in range(5):
        life = Killable.current = Killable(transport)
        kale_worker.Worker(queue_names=['default'], burst=True,
                           app=App(config, transport=life)).run()
        if flow.status() != WorkflowStatus.RUNNING:
            break
        clock.offset += 31              # what the dead worker held comes back
    assert flow.status() == WorkflowStatus.SUCCEEDED and flow.result() == 13
    assert first == ['WorkflowHooks']
