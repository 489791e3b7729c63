"""Prometheus metrics (kale.contrib.metrics), in-process over the in-memory
transport, each test with a registry of its own; the HTTP endpoint of real
`kale worker` processes is tested in test_observability_e2e.py."""
import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from kale import publisher as kale_publisher
from kale import worker as kale_worker
from kale.app import default_app
from kale.conf import settings
from kale.contrib.metrics import PrometheusHooks, RequestCounter, metrics_for
from kale.events import Outcome
from kale.exceptions import EndpointUnreachableError, HookError
from kale.hooks import WorkerHooks
from tests import tasks
from tests.support.work import work

#: Every test here runs on each pool (serial, threads, asyncio).
pytestmark = pytest.mark.usefixtures('pool')


@pytest.fixture
def registry():
    return CollectorRegistry()


@pytest.fixture
def hooks(registry):
    return PrometheusHooks(registry, port=0)


def value(registry, name, **labels):
    return registry.get_sample_value(name, labels) or 0.0


def free_port():
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


ADD = 'tests.tasks.AddTask'


def test_every_settlement_outcome_has_its_label():
    assert {outcome.metric_label for outcome in Outcome} == {
        'succeeded', 'retried', 'dead_lettered', 'skipped', 'released', 'cancelled', 'duplicate',
        'waiting'}


def test_succeeded_tasks_are_counted_by_queue_and_task(memory_broker, hooks, registry):
    tasks.AddTask.publish_batch(None, [((i, 1), {}) for i in range(3)])
    work(memory_broker, [hooks], queues=['default'])
    assert value(registry, 'kale_tasks_total', queue='default', task=ADD,
                 outcome='succeeded') == 3


def test_retries_and_the_dead_letter_are_counted(memory_broker, hooks, registry):
    with settings.override(RETRY_DELAY_MULTIPLE_SEC=0):
        tasks.NonRetriableTask.publish(None)
        tasks.FlakyOnceTask.publish(None)
        work(memory_broker, [hooks], queues=['default'])
    flaky, never = 'tests.tasks.FlakyOnceTask', 'tests.tasks.NonRetriableTask'
    assert value(registry, 'kale_tasks_total', queue='default', task=flaky, outcome='retried') == 1
    assert value(registry, 'kale_tasks_total', queue='default', task=flaky,
                 outcome='succeeded') == 1
    assert value(registry, 'kale_tasks_total', queue='default', task=never,
                 outcome='dead_lettered') == 1


def test_skipped_tasks_are_counted_as_skipped(memory_broker, hooks, registry):
    tasks.SkippedTask.publish(None)
    work(memory_broker, [hooks], queues=['default'])
    assert value(registry, 'kale_tasks_total', queue='default', task='tests.tasks.SkippedTask',
                 outcome='skipped') == 1


def test_released_tasks_are_counted_as_released(memory_broker, hooks, registry):
    tasks.AddTask.publish(None, 1, 2)
    batch_hooks = ReleaseEverything()
    worker = kale_worker.Worker(queue_names=['default'], burst=True, broker=memory_broker,
                                hooks=[hooks, batch_hooks])
    worker.run()
    assert value(registry, 'kale_tasks_total', queue='default', task=ADD, outcome='released') >= 1


class CancelEverything(WorkerHooks):
    """Answers that every task of every batch was cancelled."""

    def cancelled_tasks(self, queue, task_ids):
        return task_ids


def test_cancelled_tasks_are_counted_as_cancelled_without_a_duration(memory_broker, hooks,
                                                                     registry):
    tasks.AddTask.publish(None, 1, 2)
    work_with = kale_worker.Worker(queue_names=['default'], burst=True, broker=memory_broker,
                                   hooks=[hooks, CancelEverything()])
    assert work_with.run() == 0
    assert value(registry, 'kale_tasks_total', queue='default', task=ADD, outcome='cancelled') == 1
    assert value(registry, 'kale_task_duration_seconds_count', queue='default', task=ADD) == 0


class ReleaseEverything(WorkerHooks):
    """Stops the worker as its first batch arrives: the batch is released unrun."""

    def before_batch(self, queue, batch):
        self.worker.stop()

    def on_worker_startup(self, worker):
        self.worker = worker


def test_durations_are_observed_per_run_and_add_up_to_busy_time(memory_broker, hooks, registry):
    with settings.override(RETRY_DELAY_MULTIPLE_SEC=0):
        tasks.FlakyOnceTask.publish(None)
        work(memory_broker, [hooks], queues=['default'])
    labels = {'queue': 'default', 'task': 'tests.tasks.FlakyOnceTask'}
    assert value(registry, 'kale_task_duration_seconds_count', **labels) == 2
    total = value(registry, 'kale_task_duration_seconds_sum', **labels)
    assert 0 < total == pytest.approx(value(registry, 'kale_worker_busy_seconds_total'))


def test_latency_runs_from_publish_to_the_first_start_only(memory_broker, hooks, registry):
    with settings.override(RETRY_DELAY_MULTIPLE_SEC=0):
        tasks.FlakyOnceTask.publish(None)
        work(memory_broker, [hooks], queues=['default'])
    labels = {'queue': 'default', 'task': 'tests.tasks.FlakyOnceTask'}
    assert value(registry, 'kale_task_latency_seconds_count', **labels) == 1   # not the retry
    assert 0 <= value(registry, 'kale_task_latency_seconds_sum', **labels) < 30


def test_received_messages_and_batches_are_counted_per_queue(memory_broker, hooks, registry):
    tasks.AddTask.publish_batch(None, [((i, 1), {}) for i in range(12)])
    tasks.HighTask.publish(None)
    work(memory_broker, [hooks], queues=('default', 'high'))
    assert value(registry, 'kale_messages_received_total', queue='default') == 12
    assert value(registry, 'kale_messages_received_total', queue='high') == 1
    assert value(registry, 'kale_batches_total', queue='default') >= 2      # 10 per batch


def test_requests_of_the_memory_transport_are_counted_by_operation(memory_broker, hooks,
                                                                     registry):
    tasks.AddTask.publish(None, 1, 2)
    work(memory_broker, [hooks], queues=['default'])
    assert value(registry, 'kale_sqs_requests_total', operation='ReceiveMessage',
                 result='ok') >= 1
    assert value(registry, 'kale_sqs_requests_total', operation='DeleteMessageBatch',
                 result='ok') == 1


def test_counting_requests_stops_with_the_worker(memory_broker, hooks, registry):
    work(memory_broker, [hooks], queues=['default'])
    before = value(registry, 'kale_sqs_requests_total', operation='ReceiveMessage', result='ok')
    memory_broker.transport.receive(memory_broker.sqs_name(memory_broker.queues['default']),
                                    1, 0, 30)
    assert value(registry, 'kale_sqs_requests_total', operation='ReceiveMessage',
                 result='ok') == before


def test_publishes_are_counted_through_the_publish_hooks(memory_broker, hooks, registry):
    publisher = kale_publisher.Publisher(memory_broker, hooks=[hooks]).given_parts(default_app())
    publisher.publish_batch(tasks.AddTask, None, [((i, 1), {}) for i in range(3)])
    publisher.publish(tasks.HighTask, None, (), {})
    assert value(registry, 'kale_published_total', queue='default', task=ADD) == 3
    assert value(registry, 'kale_published_total', queue='high', task='tests.tasks.HighTask') == 1


def test_label_values_are_names_never_task_ids_or_arguments(memory_broker, hooks, registry):
    publisher = kale_publisher.Publisher(memory_broker, hooks=[hooks]).given_parts(default_app())
    ids = publisher.publish_batch(tasks.EchoTask, None, [(('secret-argument',), {})])
    work(memory_broker, [hooks], queues=['default'])
    text = generate_latest(registry).decode()
    assert 'tests.tasks.EchoTask' in text
    assert ids[0] not in text and 'secret-argument' not in text


def test_metrics_port_turns_the_hooks_on_for_workers_and_publishers(memory_broker):
    with settings.override(METRICS_PORT=free_port()):
        worker = kale_worker.Worker(queue_names=['default'], burst=True, broker=memory_broker)
        publisher = kale_publisher.Publisher(memory_broker).given_parts(default_app())
        assert any(isinstance(h, PrometheusHooks) for h in worker.hooks.hooks)
        assert any(isinstance(h, PrometheusHooks) for h in publisher.hooks.hooks)


def test_without_metrics_port_no_metrics_hook_is_loaded(memory_broker):
    worker = kale_worker.Worker(queue_names=['default'], burst=True, broker=memory_broker)
    assert not any(isinstance(h, PrometheusHooks) for h in worker.hooks.hooks)


class FakeWorker:
    name = 'worker test'

    def __init__(self, broker):
        self.broker = broker


def test_a_worker_serves_its_registry_at_metrics_until_it_stops(memory_broker, registry):
    port = free_port()
    hooks = PrometheusHooks(registry, port=port, host='127.0.0.1')
    hooks.on_worker_startup(FakeWorker(memory_broker))
    try:
        hooks.series('default', ADD).outcomes[Outcome.SUCCEEDED].inc()
        with urllib.request.urlopen('http://127.0.0.1:%d/metrics' % port, timeout=30) as answer:
            text = answer.read().decode()
    finally:
        hooks.on_worker_shutdown(None)
    assert 'kale_tasks_total{outcome="succeeded",queue="default",task="%s"} 1.0' % ADD in text
    with pytest.raises(OSError):
        urllib.request.urlopen('http://127.0.0.1:%d/metrics' % port, timeout=5)


def test_a_port_in_use_stops_the_worker_with_one_line(memory_broker, registry):
    with socket.socket() as taken:
        taken.bind(('127.0.0.1', 0))
        taken.listen()
        port = taken.getsockname()[1]
        hooks = PrometheusHooks(registry, port=port, host='127.0.0.1')
        worker = kale_worker.Worker(queue_names=['default'], burst=True, broker=memory_broker,
                                    hooks=[hooks])
        with pytest.raises(HookError, match='METRICS_PORT %d: cannot serve metrics' % port):
            worker.run()


def test_sqs_requests_are_counted_by_operation_and_result(sqs, registry):
    from kale.transport.sqs import SQSTransport, make_client
    counter = RequestCounter(metrics_for(registry).requests)
    config = settings.config
    transport = SQSTransport(make_client(for_commands=True, config=config), config=config)
    counter.attach(transport)
    transport.ensure_queue(sqs.prefix + 'counted', 30, None, 10)
    assert value(registry, 'kale_sqs_requests_total', operation='CreateQueue', result='ok') == 1
    failed = value(registry, 'kale_sqs_requests_total', operation='GetQueueUrl', result='error')
    assert not transport.queue_exists(sqs.prefix + 'missing')
    assert value(registry, 'kale_sqs_requests_total', operation='GetQueueUrl',
                 result='error') == failed + 1


def test_unreachable_endpoints_count_as_errors(registry):
    from kale.transport.sqs import SQSTransport, make_client
    with settings.override(MESSAGE_QUEUE_ENDPOINT_URL='http://127.0.0.1:%d' % free_port()):
        config = settings.config
        transport = SQSTransport(make_client(for_commands=True, config=config), config=config)
    counter = RequestCounter(metrics_for(registry).requests)
    counter.attach(transport)
    with pytest.raises(EndpointUnreachableError):
        transport.queue_exists('anything')
    assert value(registry, 'kale_sqs_requests_total', operation='GetQueueUrl', result='error') == 1


def test_task_labels_stay_bounded_whatever_messages_name():
    from kale.contrib.metrics import MAX_TASK_SERIES, task_label
    assert task_label('app.tasks.SendMail', 0) == 'app.tasks.SendMail'
    assert task_label('app.tasks.SendMail', MAX_TASK_SERIES) == 'other'
    for hostile in ('<script>', 'a' * 300, 'no_dots', 'x.y z', ''):
        assert task_label(hostile, 0) == '?'
