"""The queue gauges a web app serves (kale.contrib.queue_metrics), read with
prometheus_client's generate_latest over the in-memory transport."""
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kale.contrib.queue_metrics import QueueCollector, queue_registry, render
from kale.exceptions import EndpointUnreachableError
from kale.transport import OutgoingMessage
from tests import tasks


def samples(registry):
    """{(name, sorted labels): value} from the text exposition."""
    text = generate_latest(registry).decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def messages(found, queue, state):
    return found[('kale_queue_messages', (('queue', queue), ('state', state)))]


def test_visible_delayed_and_dead_letter_counts_per_queue(memory_broker):
    tasks.AddTask.publish_batch(None, [((i, 1), {}) for i in range(3)])
    tasks.AddTask.publish(None, 1, 2, delay_sec=60)
    queue = memory_broker.queues['default']
    memory_broker.send_dead_letters(queue, [OutgoingMessage('dead')])
    found = samples(queue_registry(memory_broker))
    assert messages(found, 'default', 'visible') == 3
    assert messages(found, 'default', 'delayed') == 1
    assert messages(found, 'default', 'in_flight') == 0
    assert messages(found, 'default', 'dead_letters') == 1
    assert found[('kale_queue_up', (('queue', 'default'),))] == 1


def test_in_flight_messages_are_counted(memory_broker):
    tasks.AddTask.publish(None, 1, 2)
    memory_broker.receive(memory_broker.queues['default'])
    assert messages(samples(queue_registry(memory_broker)), 'default', 'in_flight') == 1


def test_a_queue_not_created_yet_counts_zero_and_is_not_created(memory_broker):
    found = samples(queue_registry(memory_broker))
    assert messages(found, 'low', 'visible') == 0
    assert not memory_broker.transport.queue_exists(memory_broker.sqs_name(
        memory_broker.queues['low']))


class Unreachable:
    local = True

    def counts(self, name):
        raise EndpointUnreachableError('endpoint down')


def test_a_queue_sqs_cannot_count_is_down_not_zero(memory_broker):
    memory_broker.transport = Unreachable()
    found = samples(queue_registry(memory_broker))
    assert found[('kale_queue_up', (('queue', 'default'),))] == 0
    assert not any(name == 'kale_queue_messages' for name, _ in found)


def test_task_counts_by_status_come_from_the_callable(memory_broker):
    found = samples(queue_registry(memory_broker, task_counts=lambda: {'queued': 4, 'failed': 1}))
    assert found[('kale_records_tasks', (('status', 'queued'),))] == 4
    assert found[('kale_records_tasks', (('status', 'failed'),))] == 1


def test_a_failing_task_count_source_leaves_only_its_own_series_out(memory_broker):
    def broken():
        raise RuntimeError('records store down')
    found = samples(queue_registry(memory_broker, task_counts=broken))
    assert found[('kale_queue_up', (('queue', 'default'),))] == 1
    assert not any(name == 'kale_records_tasks' for name, _ in found)


def test_the_oldest_waiting_task_age_per_queue(memory_broker):
    registry = CollectorRegistry()
    registry.register(QueueCollector(memory_broker, oldest_queued=lambda: {'default': 1000.0},
                                     clock=lambda: 1042.5))
    assert samples(registry)[('kale_queue_oldest_task_age_seconds',
                              (('queue', 'default'),))] == 42.5


def test_registering_the_collector_asks_sqs_nothing(memory_broker):
    before = sum(memory_broker.transport.requests.values())
    queue_registry(memory_broker)
    assert sum(memory_broker.transport.requests.values()) == before


def test_render_answers_in_the_format_asked_for(memory_broker):
    registry = queue_registry(memory_broker)
    body, content_type = render(registry)
    assert content_type.startswith('text/plain') and b'kale_queue_messages' in body
    body, content_type = render(registry, 'application/openmetrics-text; version=1.0.0')
    assert content_type.startswith('application/openmetrics-text') and body.endswith(b'# EOF\n')
