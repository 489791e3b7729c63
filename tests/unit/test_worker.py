"""The worker loop, in-process over the in-memory transport (signals and real
processes are covered by test_worker_e2e.py)."""
import pytest

from kale import worker as kale_worker
from kale.exceptions import EndpointUnreachableError, UnknownQueueError
from kale.hooks import WorkerHooks
from kale.transport import OutgoingMessage
from tests import tasks
from tests.support.records import recorded_ids

#: Every test here runs on each pool (serial, threads, asyncio).
pytestmark = pytest.mark.usefixtures('pool')

events = recorded_ids


@pytest.fixture
def app(pool_app):
    """The test's app on this run's pool (the ``pool_app`` fixture)."""
    return pool_app


@pytest.fixture
def record_file(record):
    return record


class RecordingHooks(WorkerHooks):
    def __init__(self):
        self.calls = []

    def on_worker_startup(self, worker):
        self.calls.append('startup')

    def on_worker_shutdown(self, worker):
        self.calls.append('shutdown')

    def before_batch(self, queue, batch):
        self.calls.append('before_batch')

    def after_batch(self, queue, batch):
        self.calls.append('after_batch')

    def on_task_succeeded(self, settlement):
        self.calls.append('succeeded')

    def on_task_retried(self, settlement):
        self.calls.append('failed')

    def on_task_released(self, settlement):
        self.calls.append('deferred')

    def on_task_dead_lettered(self, settlement):
        self.calls.append('permanently_failed')


class BrokenHooks(WorkerHooks):
    def on_task_succeeded(self, settlement):
        raise RuntimeError('metrics are down')


def run_worker(app, queues=('default',), **kwargs):
    worker = kale_worker.Worker(queue_names=list(queues), burst=True, app=app, **kwargs)
    return worker, worker.run()


def test_burst_runs_every_task_then_exits_0(app, record_file):
    ids = app.publish_batch(tasks.RecordTask, None, [((i,), {}) for i in range(25)])
    high = app.publish(tasks.HighRecordTask, None, 'h')
    worker, code = run_worker(app, queues=('default', 'high'))
    assert code == kale_worker.EXIT_OK
    assert sorted(events(record_file, 'ran')) == sorted(ids + [high])
    assert worker.stats['succeeded'] == 26


def test_failures_are_retried_then_dead_lettered_once_with_the_hook(app, record_file):
    app = app.replace(RETRY_DELAY_MULTIPLE_SEC=0)
    task_id = app.publish(tasks.SleepTask, None, 5)
    _worker, code = run_worker(app)
    assert code == 0
    assert events(record_file, 'start') == [task_id] * (tasks.SleepTask.max_retries + 1)
    assert events(record_file, 'permanent') == [task_id]
    queue = app.queues['default']
    dead = app.transport.receive(app.broker.dead_letter_name(queue), 10, 0, 30)
    assert len(dead) == 1
    assert dead[0].attributes['kale_dead_letter_reason'].startswith('retries_exhausted: '
                                                                     'TimeLimitExceeded')


def test_a_transient_failure_succeeds_on_retry(app, record_file):
    app = app.replace(RETRY_DELAY_MULTIPLE_SEC=0)
    task_id = app.publish(tasks.FlakyOnceTask, None)
    worker, _ = run_worker(app)
    assert events(record_file, 'failed') == [task_id]
    assert events(record_file, 'ran') == [task_id]
    assert worker.stats == {'retry': 1, 'succeeded': 1}


def test_undecodable_messages_are_dead_lettered_and_the_worker_carries_on(app, record_file):
    queue = app.queues['default']
    app.broker.send(queue, [OutgoingMessage('garbage'), OutgoingMessage('kale2:s=p:x:y')])
    task_id = app.publish(tasks.RecordTask, None)
    _worker, code = run_worker(app)
    assert code == 0
    assert events(record_file, 'ran') == [task_id]
    dead = app.transport.receive(app.broker.dead_letter_name(queue), 10, 0, 30)
    assert sorted(m.attributes['kale_dead_letter_reason'].split(':')[0] for m in dead) == \
        ['bad_signature', 'not_kale_message']


def test_hooks_are_called_and_a_failing_hook_does_not_stop_work(app, record_file):
    hooks = RecordingHooks()
    app = app.replace(RETRY_DELAY_MULTIPLE_SEC=0)
    app.publish(tasks.RecordTask, None)
    app.publish(tasks.NonRetriableTask, None)
    app.publish(tasks.FlakyOnceTask, None)
    run_worker(app, hooks=[BrokenHooks(), hooks])
    assert hooks.calls[0] == 'startup' and hooks.calls[-1] == 'shutdown'
    assert hooks.calls.count('succeeded') == 2
    assert hooks.calls.count('failed') == 1
    assert hooks.calls.count('permanently_failed') == 1
    # (a batch whose tasks end apart, as on a loaded machine, is settled in parts)
    assert hooks.calls.count('after_batch') >= hooks.calls.count('before_batch') >= 2


def test_worker_startup_and_shutdown_settings_are_called(app):
    calls = []
    run_worker(app.replace(ON_WORKER_STARTUP=lambda: calls.append('up'),
                           ON_WORKER_SHUTDOWN=lambda: calls.append('down')))
    assert calls == ['up', 'down']


def test_what_start_up_made_is_kept_out_of_the_collectors_way_while_the_worker_runs(
        app, record_file):
    """gc.freeze() after start-up: the cyclic collector skips the long-lived
    objects (modules, settings, libraries) a full collection would walk."""
    import gc

    class FreezeHooks(WorkerHooks):
        frozen = -1

        def before_batch(self, queue, batch):
            self.frozen = gc.get_freeze_count()

    hooks = FreezeHooks()
    app.publish(tasks.RecordTask, None)
    run_worker(app, hooks=[hooks])
    assert hooks.frozen > 1000
    assert gc.get_freeze_count() == 0       # given back when the run ends


def test_memory_limit_releases_the_batch_and_exits_3(app, record_file):
    ids = app.publish_batch(tasks.RecordTask, None, [((i,), {}) for i in range(5)])
    _worker, code = run_worker(app.replace(DIE_ON_RESIDENT_SET_SIZE_MB=1),
                               max_in_flight=1)     # a pool: one at a time
    assert code == kale_worker.EXIT_MEMORY_LIMIT
    assert len(events(record_file, 'ran')) == 1
    counts = app.broker.counts(app.queues['default'])
    assert counts.visible == 4 and counts.in_flight == 0
    assert len(ids) == 5


def test_a_worker_in_a_tests_process_checks_only_a_memory_limit_set_explicitly(app):
    """On the in-memory transport the worker runs in a test's process, whose
    memory is the test runner's: the default limit (256 MB) does not stop it,
    one given does; on SQS the default applies."""
    from kale.config import Config
    from kale.transport.sqs import SQSTransport
    from kale.worker.limits import memory_limit_mb
    defaults = Config.from_values({})
    assert defaults.DIE_ON_RESIDENT_SET_SIZE_MB == 256
    assert memory_limit_mb(defaults, app.transport) == 0
    assert memory_limit_mb(defaults.replace(DIE_ON_RESIDENT_SET_SIZE_MB=300), app.transport) == 300
    assert memory_limit_mb(defaults, SQSTransport.__new__(SQSTransport)) == 256


def test_endpoint_outages_are_survived(app, record_file, monkeypatch):
    transport = app.transport
    real_receive = transport.receive
    outages = iter([True, True, True])

    def flaky_receive(*args):
        if next(outages, False):
            raise EndpointUnreachableError('connection refused')
        return real_receive(*args)

    monkeypatch.setattr(transport, 'receive', flaky_receive)
    task_id = app.publish(tasks.RecordTask, None)
    worker, code = run_worker(app)
    assert code == 0
    assert events(record_file, 'ran') == [task_id]
    assert worker.outage.backoff.failures == 0


def test_only_the_named_queues_are_served(app, record_file):
    app.publish(tasks.HighRecordTask, None)
    mine = app.publish(tasks.RecordTask, None)
    run_worker(app, queues=('default',))
    assert events(record_file, 'ran') == [mine]


def test_an_unknown_queue_name_is_a_clear_error(app):
    with pytest.raises(UnknownQueueError, match="--queues: queue 'nope' is not in the queue config"):
        kale_worker.Worker(queue_names=['nope'], app=app)


def test_a_bad_selector_setting_is_a_clear_error(app):
    from kale.exceptions import ImproperlyConfigured
    app = app.replace(QUEUE_SELECTOR='os.path')
    with pytest.raises(ImproperlyConfigured, match='QUEUE_SELECTOR'):
        kale_worker.Worker(app=app)


def test_a_queue_named_twice_is_served_once(app, record_file):
    task_id = app.publish(tasks.RecordTask, None)
    worker, code = run_worker(app, queues=('default', 'default'))
    assert code == 0 and [q.name for q in worker.queues] == ['default']
    assert events(record_file, 'ran') == [task_id]


def test_a_selector_that_answers_nonsense_does_not_stop_the_worker(app, record_file):
    from kale.queue_selector import SelectQueueBase

    class Nonsense(SelectQueueBase):
        def get_queue(self):
            return 'not a queue'

    task_id = app.publish(tasks.RecordTask, None)
    run_worker(app, selector_class=Nonsense)
    assert events(record_file, 'ran') == [task_id]


def test_a_worker_without_a_signing_key_refuses_to_start(app):
    from kale.exceptions import ImproperlyConfigured
    app = app.replace(MESSAGE_SIGNING_KEY='')
    with pytest.raises(ImproperlyConfigured, match='MESSAGE_SIGNING_KEY is not set'):
        kale_worker.Worker(app=app)


def test_a_timeout_class_that_is_not_one_is_refused(app):
    from kale.exceptions import ImproperlyConfigured
    app = app.replace(TASK_TIMEOUT_CLASS='os.path')
    with pytest.raises(ImproperlyConfigured, match='TASK_TIMEOUT_CLASS must name'):
        kale_worker.Worker(app=app)


def test_a_development_key_is_fine_on_queues_in_this_process(app, caplog):
    kale_worker.Worker(app=app.replace(
        MESSAGE_SIGNING_KEY='kale-development-key-not-for-production',
        MESSAGE_QUEUE_ENDPOINT_URL='', MESSAGE_QUEUE_USE_PROXY=False))
    assert 'development key' not in caplog.text


@pytest.mark.real_time('settling may retry on a thread of its own, which a test clock would '
                       'let run ahead of the stop')
def test_a_worker_stops_soon_even_if_the_endpoint_is_gone_at_shutdown(app, record_file,
                                                                        monkeypatch):
    """Regression (found by the demo's Ctrl-C test): the deletes of its last
    batch were retried until the 30 s visibility timeout ran out."""
    import time

    def unreachable(*args):
        raise EndpointUnreachableError('connection refused')

    class StopAfterTheTask(WorkerHooks):
        def on_task_finished(self, settlement):
            worker.stop()

    monkeypatch.setattr(app.transport, 'delete_batch', unreachable)
    app.publish(tasks.RecordTask, None)
    worker = kale_worker.Worker(queue_names=['default'], app=app, hooks=[StopAfterTheTask()])
    started = time.monotonic()
    assert worker.run() == kale_worker.EXIT_OK
    # It gives up settling after SHUTDOWN_SETTLE_SEC, well before the 30 s
    # visibility timeout (however long a loaded machine pauses it).
    assert time.monotonic() - started < kale_worker.SHUTDOWN_SETTLE_SEC + 15
    assert len(events(record_file, 'ran')) == 1


def test_a_burst_is_not_ended_by_one_count_that_missed_a_message(app, record, monkeypatch):
    """SQS counts visible, in-flight and delayed messages apart: a message
    whose delay ends meanwhile can be in none of one answer's figures. A
    burst ends only when two counts in a row find the queues empty. (The
    message is the worker's own retry, which a burst waits for.)"""
    from kale.transport import QueueCounts
    app = app.replace(RETRY_DELAY_MULTIPLE_SEC=1)
    task_id = app.publish(tasks.FlakyOnceTask, None)
    real_counts = app.transport.counts
    answers = []

    def counts(queue):
        answers.append(queue)
        return QueueCounts(0, 0, 0) if len(answers) == 1 else real_counts(queue)
    monkeypatch.setattr(app.transport, 'counts', counts)
    worker = kale_worker.Worker(queue_names=['default'], burst=True, app=app)
    assert worker.run() == 0
    assert recorded_ids(record, 'ran') == [task_id]
