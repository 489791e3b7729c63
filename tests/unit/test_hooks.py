"""Hooks: publish hooks around every send, worker hooks around every run, and
one failure policy for both."""
import logging

import pytest

from kale import publisher
from kale.exceptions import EndpointUnreachableError, HookError, ImproperlyConfigured
from kale.hooks import PublishHooks, WorkerHooks
from kale.transport import OutgoingMessage
from kale.worker import Worker
from tests import tasks
from tests.support.records import recorded_ids


class Tracing(PublishHooks):
    """Adds an attribute before each send and remembers what it saw."""

    instances: list = []

    def __init__(self):
        self.seen = []
        Tracing.instances.append(self)

    def before_publish(self, publication):
        self.seen.append(('before', publication.task_class, publication.queue.name,
                          publication.task_ids, publication.delay_sec))
        for attributes in publication.attributes:
            attributes['trace_parent'] = 'span-1'

    def after_publish(self, publication):
        self.seen.append(('after', publication.task_ids, publication.error))


class BrokenPublishHook(PublishHooks):
    def before_publish(self, publication):
        raise RuntimeError('metrics are down')


class FailingSender:
    def sqs_name(self, queue):
        return queue.name

    def send(self, queue, messages):
        raise EndpointUnreachableError('connection refused')


def received_attributes(broker, queue_name='default'):
    queue = broker.queues[queue_name]
    return [m.attributes for m in broker.transport.receive(broker.sqs_name(queue), 10, 0, 30)]


def test_publish_hooks_see_each_publication_and_may_add_attributes(memory_broker):
    hook = Tracing()
    previous = publisher.set_publisher(publisher.Publisher(memory_broker, hooks=[hook]))
    try:
        ids = tasks.EchoTask.publish_batch(None, [((1,), {}), ((2,), {})], delay_sec=0)
    finally:
        publisher.set_publisher(previous)
    assert hook.seen == [('before', tasks.EchoTask, 'default', ids, 0), ('after', ids, None)]
    assert [a['trace_parent'] for a in received_attributes(memory_broker)] == ['span-1'] * 2


def test_after_publish_sees_the_error_of_a_failed_send():
    hook = Tracing()
    previous = publisher.set_publisher(publisher.Publisher(FailingSender(), hooks=[hook]))
    try:
        with pytest.raises(EndpointUnreachableError):
            tasks.EchoTask.publish(None, 1)
    finally:
        publisher.set_publisher(previous)
    assert hook.seen[-1][0] == 'after'
    assert isinstance(hook.seen[-1][2], EndpointUnreachableError)


def test_publish_hooks_setting_takes_dotted_paths(app):
    Tracing.instances.clear()
    task_id = app.replace(PUBLISH_HOOKS=['tests.unit.test_hooks.Tracing']).publish(
        tasks.EchoTask, None, 1)
    [hook] = Tracing.instances
    assert hook.seen[-1] == ('after', [task_id], None)


def test_a_failing_publish_hook_is_logged_and_the_task_still_goes_out(app, caplog):
    broken = app.replace(PUBLISH_HOOKS=[BrokenPublishHook])
    with caplog.at_level(logging.ERROR, logger='kale.hooks'):
        broken.publish(tasks.EchoTask, None, 1)
    assert len(received_attributes(broken.broker)) == 1
    assert 'hook BrokenPublishHook.before_publish failed' in caplog.text


def test_a_hook_that_is_not_a_hook_class_is_a_clear_error(app):
    not_a_hook = app.replace(PUBLISH_HOOKS=['tests.unit.test_hooks.FailingSender'])
    with pytest.raises(ImproperlyConfigured, match="PUBLISH_HOOKS entry 'tests.unit.test_hooks."
                                                   "FailingSender' is not a kale.hooks."
                                                   "PublishHooks"):
        not_a_hook.publish(tasks.EchoTask, None, 1)
    publish_hook = app.replace(WORKER_HOOKS=[Tracing])
    with pytest.raises(ImproperlyConfigured, match='WORKER_HOOKS entry .* is not a kale.hooks.'
                                                   'WorkerHooks'):
        Worker(app=publish_hook)


class Timeline(WorkerHooks):
    """Writes hook calls into the same record file the tasks write to."""

    def __init__(self, path):
        self.path = path

    def _note(self, event, task_id):
        with open(self.path, 'a') as f:
            f.write('%s %s 0 0\n' % (event, task_id))

    def on_task_started(self, queue, received, message):
        self._note('started', message.task_id)

    def on_task_finished(self, settlement):
        self._note('finished:' + settlement.outcome.value, settlement.task_id)

    def on_task_succeeded(self, settlement):
        self._note('succeeded', settlement.task_id)

    def on_task_dead_lettered(self, settlement):
        self._note('dead:%s' % settlement.verified, settlement.task_id)


def run_worker(broker=None, **kwargs):
    """A burst worker on 'default': over ``broker`` (the default app's
    settings), or of the ``app=`` given."""
    return Worker(queue_names=['default'], burst=True, broker=broker, **kwargs).run()


def test_a_task_is_started_then_runs_then_finishes_then_succeeds(memory_broker, record):
    task_id = tasks.RecordTask.publish(None)
    assert run_worker(memory_broker, hooks=[Timeline(record)]) == 0
    with open(record) as f:
        events = [line.split()[0] for line in f]
    assert events == ['started', 'ran', 'finished:succeeded', 'succeeded']
    assert set(recorded_ids(record, 'started')) == {task_id}


def test_hooks_see_that_an_unverified_message_is_known_only_by_its_sqs_id(memory_broker, record):
    queue = memory_broker.queues['default']
    forged = OutgoingMessage('not a kale body', {'kale_task_id': 'forged-id',
                                                 'kale_task_name': 'tests.tasks.RecordTask'})
    [message_id] = memory_broker.send(queue, [forged])
    assert run_worker(memory_broker, hooks=[Timeline(record)]) == 0
    assert recorded_ids(record, 'dead:False') == ['message:' + message_id]
    assert recorded_ids(record, 'started') == []


def test_a_verified_failure_is_reported_as_its_task(memory_broker, record):
    task_id = tasks.NonRetriableTask.publish(None)
    assert run_worker(memory_broker, hooks=[Timeline(record)]) == 0
    assert recorded_ids(record, 'dead:True') == [task_id]


class FailsToStart(WorkerHooks):
    def on_worker_startup(self, worker):
        raise RuntimeError('no database')


class FailsToStop(WorkerHooks):
    def on_worker_shutdown(self, worker):
        raise RuntimeError('flush failed')


def test_a_failing_startup_hook_stops_the_worker_before_any_task_runs(memory_broker, record):
    tasks.RecordTask.publish(None)
    with pytest.raises(HookError, match='FailsToStart.on_worker_startup failed: RuntimeError: '
                                        'no database'):
        run_worker(memory_broker, hooks=[FailsToStart()])
    assert recorded_ids(record, 'ran') == []


def test_the_startup_setting_follows_the_same_rule_and_is_named(app, record):
    app.publish(tasks.RecordTask, None)

    def broken():
        raise RuntimeError('no cache')

    with pytest.raises(HookError, match='ON_WORKER_STARTUP failed: RuntimeError: no cache'):
        run_worker(app=app.replace(ON_WORKER_STARTUP=broken))
    assert recorded_ids(record, 'ran') == []


def test_a_failing_shutdown_hook_is_logged_and_the_worker_exits_0(memory_broker, record, caplog):
    task_id = tasks.RecordTask.publish(None)
    with caplog.at_level(logging.ERROR, logger='kale.hooks'):
        assert run_worker(memory_broker, hooks=[FailsToStop()]) == 0
    assert recorded_ids(record, 'ran') == [task_id]
    assert 'hook FailsToStop.on_worker_shutdown failed' in caplog.text


def test_the_settings_hooks_run_first_and_last(app):
    calls = []

    class Hook(WorkerHooks):
        def on_worker_startup(self, worker):
            calls.append('hook up')

        def on_worker_shutdown(self, worker):
            calls.append('hook down')

    run_worker(app=app.replace(ON_WORKER_STARTUP=lambda: calls.append('setting up'),
                               ON_WORKER_SHUTDOWN=lambda: calls.append('setting down')),
               hooks=[Hook()])
    assert calls == ['setting up', 'hook up', 'setting down', 'hook down']


def test_retry_copies_are_not_publications(app, record):
    """Publish hooks see what the application publishes, not the worker's copies."""
    hook = Tracing()
    retrying = app.replace(RETRY_DELAY_MULTIPLE_SEC=0, PUBLISH_HOOKS=[hook])
    task_id = retrying.publish(tasks.FlakyOnceTask, None)
    assert run_worker(app=retrying) == 0
    assert recorded_ids(record, 'ran') == [task_id]         # the retry copy ran
    assert [entry[0] for entry in hook.seen] == ['before', 'after']


class OldNames(WorkerHooks):
    """Hooks under the names they had before they followed the outcomes."""

    def __init__(self):
        self.calls = []

    def on_task_failed(self, settlement):
        self.calls.append(('failed', settlement.outcome.value))

    def on_task_permanently_failed(self, settlement):
        self.calls.append(('permanently_failed', settlement.outcome.value))

    def on_task_deferred(self, settlement):
        self.calls.append(('deferred', settlement.outcome.value))


def test_hooks_under_their_old_names_are_still_called_with_a_warning_once(caplog):
    from kale.events import Outcome
    from kale.hooks import HookDispatcher
    from kale.worker.report import HOOKS
    from tests.support.received import settled
    old = OldNames()
    dispatcher = HookDispatcher([old])
    with pytest.warns(DeprecationWarning, match='is the old name of the hook') as warned:
        for outcome in (Outcome.RETRY, Outcome.DEAD_LETTER, Outcome.RELEASE, Outcome.RETRY):
            dispatcher(HOOKS[outcome], settled(outcome)[1])
    assert [str(w.message).split(' is')[0] for w in warned] == [
        'OldNames.on_task_failed', 'OldNames.on_task_permanently_failed',
        'OldNames.on_task_deferred']
    assert old.calls == [('failed', 'retry'), ('permanently_failed', 'dead_letter'),
                         ('deferred', 'release'), ('failed', 'retry')]
    assert sum('old name of the hook' in r.getMessage() for r in caplog.records) == 3
