"""kale.App: a typed configuration and the parts built from it, explicit;
two apps with different settings side by side in one process."""
from __future__ import annotations

import dataclasses
import uuid

import pytest

import kale
from kale import settings
from kale.app import App, default_app
from kale.config import SETTING_NAMES, Config, defaults
from kale.exceptions import DecodeError, ImproperlyConfigured
from kale.transport import VisibilityChange
from kale.worker import Worker
from tests import tasks

TEST_SETTINGS = 'tests.kale_test_settings'


def an_app(endpoint: str, key: str) -> App:
    # RECORDS_URL: the settings module is imported once per process, with the
    # environment of the test that came first.
    return App(Config.load(TEST_SETTINGS), MESSAGE_QUEUE_ENDPOINT_URL=endpoint,
               QUEUE_PREFIX='a%s-' % uuid.uuid4().hex[:10], MESSAGE_SIGNING_KEY=key,
               RECORDS_URL='')


def test_the_config_has_a_typed_field_for_every_setting_and_nothing_else():
    assert SETTING_NAMES == set(defaults())
    for field in dataclasses.fields(Config):
        if field.name.isupper():
            assert field.type not in ('Any', ''), field.name


def test_a_config_is_checked_once_when_built_and_frozen():
    with pytest.raises(ImproperlyConfigured, match='setting MAX_RECEIVE_COUNT must be a whole'):
        Config.from_values({'MAX_RECEIVE_COUNT': 'ten'})
    config = Config.from_values({'TASK_MODULES': ['a.b'], 'MY_PAGE_SIZE': 20})
    assert config.TASK_MODULES == ('a.b',) and config.get('MY_PAGE_SIZE') == 20
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.QUEUE_PREFIX = 'x-'      # type: ignore[misc]
    with pytest.raises(ImproperlyConfigured, match='setting SERIALIZER must be one of'):
        config.replace(SERIALIZER='yaml')
    with pytest.raises(AttributeError, match="no setting 'NOPE'"):
        config.get('NOPE')


def test_kale_app_is_the_app_class_and_the_settings_build_the_default_app():
    assert kale.App is App
    app = default_app()
    assert app.config is settings.config and default_app() is app
    assert app.config.module_name == TEST_SETTINGS
    assert tasks.AddTask.publish.__self__ is tasks.AddTask   # Task.publish goes through it


def test_parts_are_built_once_per_app_and_a_changed_setting_gets_new_ones():
    app = App(Config.load(TEST_SETTINGS))
    assert app.codec is app.codec and app.queues is app.queues
    assert app.registry.resolve('tests.tasks.AddTask') is tasks.AddTask
    other = App(app.config, TASK_MAPPER={'old.Add': 'tests.tasks.AddTask'})
    assert other.codec is not app.codec and other.registry is not app.registry
    assert other.registry.resolve('old.Add') is tasks.AddTask
    with pytest.raises(DecodeError):
        app.registry.resolve('old.Add')


def test_two_apps_with_different_settings_publish_and_work_side_by_side(sqs_endpoint):
    """Each app publishes to its own queues, signed with its own key; a worker
    given one app works that app's queue only, and refuses the other's body."""
    first = an_app(sqs_endpoint, 'first-app-signing-key-0123456789')
    second = an_app(sqs_endpoint, 'second-app-signing-key-012345678')
    one = first.publish(tasks.AddTask, None, 1, 2)
    two = second.publish(tasks.AddTask, None, 3, 4)
    assert one != two

    queue = first.queues['default']
    first_name, second_name = first.broker.sqs_name(queue), second.broker.sqs_name(queue)
    assert first_name != second_name
    peeked = second.broker.transport.receive(second_name, 10, 0, 30)
    assert len(peeked) == 1
    assert second.codec.decode(peeked[0].body, second_name).task_id == two
    with pytest.raises(DecodeError):            # the first app's key does not verify it
        first.codec.decode(peeked[0].body, second_name)
    second.broker.transport.change_visibility_batch(
        second_name, [VisibilityChange(peeked[0].receipt_handle, 0)])

    worker = Worker(app=first, burst=True)
    assert worker.run() == 0
    assert worker.stats['succeeded'] == 1
    assert first.broker.counts(queue).visible == 0
    assert second.broker.counts(queue).visible == 1      # left for the second app's workers


def test_two_apps_keep_their_own_records_and_workflows(sqs_endpoint, tmp_path):
    """Two apps in one process, each with its own queues and its own records
    database: each publishes, works (its worker built with the app), records
    and moves its workflows on in its own database only."""
    from kale import records, workflow
    from tests import workflow_tasks as wt
    apps = []
    for name in ('first', 'second'):
        apps.append(App(an_app(sqs_endpoint, '%s-app-signing-key-0123456789ab' % name).config,
                        RECORDS_URL='sqlite:///%s' % (tmp_path / ('%s.db' % name))))
    first, second = apps
    one = first.publish(tasks.AddTask, None, 1, 2)
    two = second.publish(tasks.AddTask, None, 3, 4)
    flows = [workflow.submit(workflow.chain(wt.Add.s(1, 2), wt.Add.s(10)), app=app)
             for app in apps]
    for app in apps:
        for _ in range(3):                      # the chain's second node, once the first ran
            Worker(app=app, burst=True).run()
    assert records.get(one, app=first).status == 'succeeded'
    assert records.get(two, app=second).status == 'succeeded'
    assert records.get(one, app=second) is None and records.get(two, app=first) is None
    assert [flow.result() for flow in flows] == [13, 13]
    assert workflow.get(flows[0].id, app=first).status() == 'succeeded'
    with pytest.raises(kale.exceptions.WorkflowNotFoundError):
        workflow.get(flows[0].id, app=second)
    for app in apps:
        ids = {record.id for record in records.queries(app=app).iterate(
            records.TaskFilter())}
        assert (one in ids) == (app is first) and (two in ids) == (app is second)
        [row] = records.queries(app=app).workers()       # this process, in each
        assert row.state == 'stopped'


def test_two_apps_keep_their_own_limits_and_outboxes(sqs_endpoint, tmp_path):
    """Two apps with their own QUEUE_PREFIX, RECORDS_URL, RATE_LIMIT_URL and
    OUTBOX_URL: each relays its outbox to its own queues, and its workers
    take their rate-limit tokens from its own limits database, recording in
    its own records database only."""
    import threading

    import sqlalchemy

    from kale import outbox, records
    from kale.outbox.relay import Relay, with_records
    from tests import flow_tasks as ft

    def db(app_name: str, what: str) -> str:
        return 'sqlite:///%s' % (tmp_path / ('%s-%s.db' % (app_name, what)))

    apps = {name: App(an_app(sqs_endpoint, '%s-app-signing-key-0123456789ab' % name).config,
                      RECORDS_URL=db(name, 'records'), RATE_LIMIT_URL=db(name, 'limits'),
                      OUTBOX_URL=db(name, 'outbox'))
            for name in ('first', 'second')}
    relayed, rated = {}, {}
    for name, app in apps.items():
        engine = outbox.open_database(app.config.OUTBOX_URL)
        outbox.init(engine)
        with engine.begin() as conn:
            relayed[name] = outbox.publish(conn, tasks.AddTask, None, 1, 2, app=app)
        relay = Relay(engine, app.broker, poll_sec=0.05, config=app.config,
                      **with_records(app))
        relay.run(threading.Event(), until_empty=True)
        assert relay.counts.sent == 1 and relay.counts.rejected == 0
        engine.dispose()
        rated[name] = app.publish(ft.RatedTask, None, 1)
    for app in apps.values():
        Worker(app=app, burst=True).run()

    for name, app in apps.items():
        other = apps['second' if name == 'first' else 'first']
        for task_id in (relayed[name], rated[name]):
            assert records.get(task_id, app=app).status == 'succeeded'
            assert records.get(task_id, app=other) is None
        limits = sqlalchemy.create_engine(app.config.RATE_LIMIT_URL)
        with limits.connect() as conn:
            keys = [row[0] for row in conn.exec_driver_sql('SELECT key FROM kale_rate_buckets')]
        limits.dispose()
        assert keys == [ft.RatedTask.task_path()], (name, keys)
        own_records = sqlalchemy.create_engine(app.config.RECORDS_URL)
        with own_records.connect() as conn:         # the limits are kept apart from the records
            assert conn.exec_driver_sql('SELECT count(*) FROM kale_rate_buckets').scalar() == 0
        own_records.dispose()


def test_an_app_on_its_own_transport_and_clock_publishes_and_works_there(app):
    """The test fixture's app: the in-memory transport and a FakeClock; its
    workers read the clock, and replace() keeps both."""
    from kale.transport.memory import MemoryTransport
    assert isinstance(app.transport, MemoryTransport) and app.broker.transport is app.transport
    assert app.publisher.clock is app.clock
    task_id = app.publish(tasks.AddTask, None, 1, 2)
    assert default_app().broker.transport is not app.transport     # nothing went elsewhere
    changed = app.replace(RETRY_DELAY_JITTER=0.5)
    assert (changed.transport, changed.clock) == (app.transport, app.clock)
    assert changed.config.RETRY_DELAY_JITTER == 0.5 and app.config.RETRY_DELAY_JITTER == 0.0
    worker = Worker(app=changed, burst=True)
    assert worker.clock is app.clock
    assert worker.run() == 0 and worker.stats['succeeded'] == 1
    assert task_id
