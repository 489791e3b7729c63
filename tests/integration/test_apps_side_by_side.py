"""Two apps in one process, each on its own in-memory transport, clock and
records: every feature an app serves works with that app's parts and
settings, never the default app's or the other app's (the web routes, the
scheduler's ticks, topics, the recorder's settings, the webhooks' sender,
the records' TASK_MAPPER, and two apps built on one Config)."""
from __future__ import annotations

import types
from typing import Any

import pytest

from kale import records, topics, workflow
from kale.app import App
from kale.conf import settings
from kale.config import Config
from kale.message import Message
from kale.transport import OutgoingMessage
from kale.transport.memory import MemoryTransport
from kale.web import create_app
from kale.worker import Worker
from tests import tasks
from tests import workflow_tasks as wt
from tests.support.clock import FakeClock
from tests.support.schedules import run_until
from tests.support.web import api_client

TEST_SETTINGS = 'tests.kale_test_settings'
TOKEN = 'b' * 32
#: An endpoint nothing answers on: what reaches for the default app's SQS or
#: SNS instead of the app's own transport fails at once.
NOWHERE = 'http://127.0.0.1:9'
TICKS = {'ticks': {'task': 'tests.schedule_tasks.Tick', 'schedule': 60, 'args': ['hello'],
                   'catch_up': 'all'}}


@pytest.fixture(autouse=True)
def closed_recorders():
    from kale.records.recorder import reset_recorders
    yield
    reset_recorders()


def on_own_transport(config: Config, start: float = 1000.0) -> App:
    """An app of ``config`` on a transport and a clock of its own."""
    clock = FakeClock(start)
    return App(config, transport=MemoryTransport(clock=clock), clock=clock)


def an_app(tmp_path: Any, name: str, start: float = 1000.0, **values: Any) -> App:
    """An app of the test settings on a transport and a clock of its own,
    its records in ``name``.db."""
    values.setdefault('RECORDS_URL', 'sqlite:///%s' % (tmp_path / ('%s.db' % name)))
    return on_own_transport(Config.load(TEST_SETTINGS, fresh=True).replace(
        MESSAGE_QUEUE_ENDPOINT_URL=NOWHERE, **values), start)


def visible(app: App, queue: str = 'default') -> int:
    return app.broker.counts(app.queues[queue]).visible


def default_queued(broker: Any, queue: str = 'default') -> int:
    """Messages on the default app's (in-memory) queue."""
    name = broker.prefix + queue
    return broker.transport.counts(name).total if broker.transport.queue_exists(name) else 0


# --- the web routes ------------------------------------------------------------------------

def test_the_web_app_of_an_app_lists_and_shows_its_workflows(tmp_path, records_url,
                                                            memory_broker):
    b = an_app(tmp_path, 'b')
    flow = workflow.submit(workflow.chain(wt.Add.s(1, 2), wt.Add.s(10)), app=b)
    client = api_client(create_app(app=b, broker=lambda: b.broker))
    listed = client.get('/api/workflows')
    assert listed.status_code == 200
    assert [row['id'] for row in listed.json()['workflows']] == [flow.id]
    shown = client.get('/api/workflows/%s' % flow.id)
    assert shown.status_code == 200 and shown.json()['id'] == flow.id


def test_a_submission_to_the_web_app_of_an_app_goes_to_its_queues(tmp_path, records_url,
                                                                 memory_broker):
    b = an_app(tmp_path, 'b')
    client = api_client(create_app(app=b, token=TOKEN), Authorization='Bearer ' + TOKEN)
    answer = client.post('/api/workflows', content='{"tasks": [{"task": '
                         '"tests.workflow_tasks.Add", "args": [{"value": 1}, {"value": 2}]}]}')
    assert answer.status_code == 200, answer.text
    assert visible(b) == 1 and default_queued(memory_broker) == 0


def test_the_web_app_of_an_app_counts_its_queues(tmp_path, records_url, memory_broker):
    b = an_app(tmp_path, 'b')
    b.publish(tasks.AddTask, None, 1, 2)
    client = api_client(create_app(app=b))
    with settings.override(MESSAGE_QUEUE_ENDPOINT_URL=NOWHERE):
        answer = client.get('/api/queues')
    assert answer.status_code == 200, answer.text
    rows = {row['name']: row for row in answer.json()['queues']}
    assert rows['default']['visible'] == 1


# --- the scheduler -----------------------------------------------------------------------

def test_the_scheduler_of_an_app_publishes_its_ticks_to_its_queues(tmp_path, memory_broker):
    """``kale worker --scheduler`` of app b: the scheduler its hooks start
    takes its lease in b's records and publishes b's ticks to b's queues."""
    from kale.schedules.scheduler import SchedulerHooks
    b = an_app(tmp_path, 'b', SCHEDULES=TICKS)
    hooks = SchedulerHooks()
    worker = types.SimpleNamespace(app=b, config=b.config, clock=b.clock, queues=[])
    hooks.on_worker_startup(worker)
    scheduler = hooks.scheduler
    hooks.on_worker_shutdown(worker)       # its thread stops: the test steps it on b's clock
    assert scheduler is not None
    run_until(b.clock, b.clock.time() + 150, scheduler)
    assert len(scheduler.published) == 2
    assert visible(b) == 2 and default_queued(memory_broker) == 0


# --- topics ------------------------------------------------------------------------------

def test_an_event_published_with_an_app_goes_to_its_topics(tmp_path, memory_broker):
    b = an_app(tmp_path, 'b', TASK_MODULES=('tests.topic_tasks',), AUTO_CREATE_TOPICS=True)
    out = tmp_path / 'runs'
    topics.publish('orders', {'out': str(out), 'n': 1}, app=b)
    assert visible(b) == 1 and default_queued(memory_broker) == 0   # ReceiptMailer's copy
    assert Worker(app=b, burst=True, queue_names=['default']).run() == 0
    assert out.read_text() == 'mail 1\n'


# --- the recorder ------------------------------------------------------------------------

def test_two_apps_on_one_records_url_keep_their_own_recorder_settings(tmp_path):
    url = 'sqlite:///%s' % (tmp_path / 'shared.db')
    a = an_app(tmp_path, 'a', RECORDS_URL=url, RECORDS_BUFFER_SIZE=50)
    b = an_app(tmp_path, 'b', RECORDS_URL=url, RECORDS_BUFFER_SIZE=77)
    assert records.recorder_for(app=a).buffer_size == 50
    assert records.recorder_for(app=b).buffer_size == 77
    task_id = a.publish(tasks.AddTask, None, 1, 2)
    assert records.get(task_id, app=b).status == 'queued'       # one database, shared


# --- the webhooks' sender ----------------------------------------------------------------

def test_each_app_delivers_its_webhooks_on_its_own_clock(tmp_path):
    """The delivery of each app's event is signed at that app's time."""
    from kale import webhooks
    from kale.webhooks import fanout, sender
    from tests.support.webhook_receiver import Receiver, verify
    server = Receiver()
    apps = [an_app(tmp_path, name, start=start, WEBHOOK_ALLOWED_HOSTS=('127.0.0.1',))
            for name, start in (('a', 1000.0), ('b', 5000.0))]
    try:
        for app in apps:
            hook = webhooks.add('orders', server.url(), app=app)
            [task_id] = fanout.deliver('orders', 'evt_1', {'order': 7}, app=app)
            assert Worker(app=app, burst=True).run() == 0
            assert records.get(task_id, app=app).status == 'succeeded'
            request = server.requests[-1]
            assert verify(hook.secret, request.headers, request.body, now=int(app.clock.time()))
            assert request.headers['webhook-timestamp'] == str(int(app.clock.time()))
        assert len(server.requests) == 2
    finally:
        for app in apps:
            sender.close(app)
        server.close()


# --- the records' TASK_MAPPER ------------------------------------------------------------

def test_the_records_of_an_app_name_tasks_through_its_task_mapper(tmp_path):
    """A task recorded under an old path that b's TASK_MAPPER maps: b's
    records resolve it (AddTask keeps no result, and says so)."""
    from kale.exceptions import TaskResultError
    b = an_app(tmp_path, 'b', TASK_MAPPER={'old.Add': 'tests.tasks.AddTask'})
    queue = b.queues['default']
    name = b.broker.declare(queue)
    message = Message(task_id='old-add-1', task_name='old.Add', args=(1, 2),
                      published_at=b.clock.time(), sent_at=b.clock.time())
    b.broker.transport.send(name, OutgoingMessage(b.codec.to_outgoing(message, name).body))
    assert Worker(app=b, burst=True).run() == 0
    assert records.get('old-add-1', app=b).status == 'succeeded'
    with pytest.raises(TaskResultError, match='does not store its result'):
        records.result('old-add-1', app=b)


# --- two apps on one Config ----------------------------------------------------------------

def test_two_apps_built_on_one_config_use_their_own_parts(tmp_path):
    """A workflow of the second app moves on through the second app: its
    next node goes to the second app's transport, not the first's."""
    config = Config.load(TEST_SETTINGS, fresh=True).replace(
        MESSAGE_QUEUE_ENDPOINT_URL=NOWHERE, RECORDS_URL='sqlite:///%s' % (tmp_path / 'one.db'))
    first, second = on_own_transport(config), on_own_transport(config)
    flow = workflow.submit(workflow.chain(wt.Add.s(1, 2), wt.Add.s(10)), app=second)
    assert Worker(app=second, burst=True).run() == 0
    assert visible(first) == 0
    assert Worker(app=second, burst=True).run() == 0
    assert workflow.get(flow.id, app=second).result() == 13
