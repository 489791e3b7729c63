"""The claim on a workflow node's publish, on the memory transport and store
with a FakeClock: a publish that is merely slow is never sent again by the
sweep, however long it blocks; the nodes of a publisher that died are sent
once its claim has lapsed, once."""
from __future__ import annotations

import threading

import pytest

from kale import worker as kale_worker
from kale import workflow
from kale.exceptions import SQSError
from kale.statuses import WorkflowStatus
from kale.workflow import run
from kale.workflow.state import keeper
from tests import workflow_tasks as wt
from tests.support.processes import wait_for

WIDTH = 30


class SlowSends:
    """The app's transport, with the sends of the thread named ``slow``
    held until :attr:`release` is set (a publish that takes as long as the
    test wants)."""

    def __init__(self, transport, monkeypatch):
        self.blocked = threading.Event()
        self.release = threading.Event()
        send_batch = transport.send_batch

        def held(queue, messages):
            if threading.current_thread().name == 'slow':
                self.blocked.set()
                assert self.release.wait(60), 'the test never released the slow publish'
            return send_batch(queue, messages)
        monkeypatch.setattr(transport, 'send_batch', held)


def chord():
    return workflow.chord(workflow.group(*(wt.Add.s(i, 1) for i in range(WIDTH))), wt.Total.s())


def submitted_slowly(app, slow):
    """A chord whose group's publish is blocked in its first send: (the
    thread submitting it, a list that gets its Workflow)."""
    found = []
    thread = threading.Thread(target=lambda: found.append(
        workflow.submit(chord(), clock=app.clock, app=app)), name='slow')
    thread.start()
    assert slow.blocked.wait(30), 'the slow publish never started'
    return thread, found


def submitted_then_died(app, monkeypatch):
    """A chord recorded (its group claimed) by a submitter that died before
    it published anything."""
    with monkeypatch.context() as patched:
        patched.setattr(run, 'publish_nodes', lambda state, ready, app: None)
        return workflow.submit(chord(), clock=app.clock, app=app)


def sweeper(app):
    return run.WorkflowHooks(app, clock=app.clock)


def work(app):
    assert kale_worker.Worker(queue_names=['default'], burst=True, app=app).run() == 0


def test_a_slow_publish_is_never_sent_again_and_a_dead_publishers_nodes_are(app, monkeypatch):
    app = app.replace(RECORDS_URL='memory://claims-slow', RECORDS_SETTLE_WAIT_SEC=0)
    slow = SlowSends(app.transport, monkeypatch)
    thread, found = submitted_slowly(app, slow)
    try:
        dead = submitted_then_died(app, monkeypatch)
        sweep = sweeper(app)
        queue = app.broker.sqs_name(app.queues['default'])
        # Far past the grace each time (every claim would have lapsed), the
        # renewer's round renews the slow one's claims; the sweep sends the
        # dead submitter's group, once, and never the slow one's.
        for sent in (WIDTH, 0, 0):
            app.clock.advance(60)
            assert keeper(app).renew() == WIDTH
            assert sweep.sweep() == (sent, 0)
            assert app.transport.counts(queue).visible == WIDTH
    finally:
        slow.release.set()
        thread.join(30)
    [submitted] = found
    assert app.transport.counts(queue).visible == 2 * WIDTH       # each node sent once
    app.clock.advance(60)
    assert sweep.sweep() == (0, 0)              # every node marked published
    for _ in range(3):
        work(app)
    for flow in (submitted, dead):
        assert flow.status() == WorkflowStatus.SUCCEEDED
        assert flow.result() == sum(range(1, WIDTH + 1))


def test_a_publish_that_raises_marks_what_it_sent_and_releases_the_rest(app, monkeypatch):
    """SQS refuses the third request of a group's publish: the twenty nodes
    sent are marked published, the claims of the ten others are released,
    and the next sweep sends those ten at once (no wait for a claim to lapse)."""
    app = app.replace(RECORDS_URL='memory://claims-raised', RECORDS_SETTLE_WAIT_SEC=0)
    send_batch, requests = app.transport.send_batch, []

    def refused_third(queue, messages):
        requests.append(len(messages))
        if len(requests) == 3:
            raise SQSError('SQS is down')
        return send_batch(queue, messages)
    with monkeypatch.context() as patched:
        patched.setattr(app.transport, 'send_batch', refused_third)
        with pytest.raises(SQSError, match='SQS is down'):
            workflow.submit(chord(), clock=app.clock, app=app)
    queue = app.broker.sqs_name(app.queues['default'])
    assert app.transport.counts(queue).visible == 20
    assert sweeper(app).sweep() == (WIDTH - 20, 0)
    assert app.transport.counts(queue).visible == WIDTH
    for _ in range(3):
        work(app)
    [listed] = workflow.list_workflows(app=app)
    assert listed['status'] == WorkflowStatus.SUCCEEDED


def test_the_renewer_renews_the_claims_while_a_publish_runs(app, monkeypatch):
    """The keeper's thread renews every third of the grace (0.3 s here, on
    the machine's clock) what its process is still publishing."""
    app = app.replace(RECORDS_URL='memory://claims-renewer', RECORDS_SETTLE_WAIT_SEC=0,
                      WORKFLOW_PUBLISH_GRACE_SEC=0.3)
    slow = SlowSends(app.transport, monkeypatch)
    thread, found = submitted_slowly(app, slow)
    try:
        app.clock.advance(60)
        state = run._state(app)
        wait_for(lambda: all(node.claimed_until > app.clock.time() for node in state.store.nodes(
            workflow.list_workflows(app=app)[0]['id']) if node.state == 'queued'),
            10, 'the renewer to renew the claims')
        assert sweeper(app).sweep() == (0, 0)
    finally:
        slow.release.set()
        thread.join(30)
    assert found and app.transport.counts(
        app.broker.sqs_name(app.queues['default'])).visible == WIDTH
