"""kale web's /metrics: the queue gauges and the records' counts, scraped
in-process through Starlette's test client."""
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kale import records
from kale.web import create_app
from tests import records_tasks as rt
from tests.support.web import api_client
from tests.support.work import work


@pytest.fixture
def client(memory_broker, records_url):
    return api_client(create_app(broker=lambda: memory_broker))


def scrape(client, **headers):
    answer = client.get('/metrics', headers=headers)
    assert answer.status_code == 200, answer.text
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(answer.text)
            for sample in family.samples}


def test_metrics_has_each_queues_messages_by_state(client):
    ids = rt.PlainTask.publish_batch(None, [((i,), {}) for i in range(3)])
    records.get(ids[0])
    found = scrape(client)
    assert found[('kale_queue_messages', (('queue', 'default'), ('state', 'visible')))] == 3
    assert found[('kale_queue_messages', (('queue', 'default'), ('state', 'dead_letters')))] == 0
    assert found[('kale_queue_up', (('queue', 'default'),))] == 1


def test_metrics_has_the_records_task_counts_by_status(client, memory_broker):
    rt.PlainTask.publish_batch(None, [((i,), {}) for i in range(2)])
    rt.BrokenTask.publish(None)
    work(memory_broker)
    found = scrape(client)
    assert found[('kale_records_tasks', (('status', 'succeeded'),))] == 2
    assert found[('kale_records_tasks', (('status', 'failed'),))] == 1
    assert found[('kale_records_tasks', (('status', 'queued'),))] == 0


@pytest.mark.real_time("record times are the machine's epoch seconds")
def test_metrics_has_the_oldest_queued_task_per_queue(client):
    before = time.time()
    first = rt.PlainTask.publish(None, 1)
    records.get(first)
    age = scrape(client)[('kale_queue_oldest_task_age_seconds', (('queue', 'default'),))]
    assert 0 <= age <= time.time() - before + 1


def test_metrics_needs_the_token_when_one_is_set(memory_broker, records_url):
    client = api_client(create_app(token='s' * 32, broker=lambda: memory_broker))
    assert client.get('/metrics').status_code == 401
    assert ('kale_queue_up', (('queue', 'default'),)) in scrape(
        client, Authorization='Bearer ' + 's' * 32)


def test_metrics_answers_openmetrics_when_asked(client):
    answer = client.get('/metrics', headers={'Accept': 'application/openmetrics-text'})
    assert answer.headers['content-type'].startswith('application/openmetrics-text')
    assert answer.text.endswith('# EOF\n')


def test_without_prometheus_client_metrics_is_one_line_501(client, monkeypatch):
    import builtins
    real_import = builtins.__import__

    def blocked(name, *args, **kwargs):
        if name.startswith('prometheus_client') or name == 'kale.contrib.queue_metrics' or (
                name == 'kale.contrib' and 'queue_metrics' in (args[2] or ())):
            raise ImportError('blocked by the test', name='prometheus_client')
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, '__import__', blocked)
    answer = client.get('/metrics')
    assert answer.status_code == 501
    assert answer.json() == {'error': "/metrics needs prometheus_client: pip install "
                                      "'kale-sqs[metrics]'"}


def test_labels_read_from_the_records_are_bounded_to_the_configured_queues(client,
                                                                          memory_broker):
    """3000 records naming 3000 queues (written straight into the database)
    make no series of their own: they count under ``other``."""
    now = time.time()
    records.store().write([{'id': 'x%d' % n, 'task': 't.T', 'queue': 'q%d' % n,
                            'status': 'queued', 'attempts': 0, 'published_at': now - n,
                            'updated_at': now} for n in range(3000)], [], [])
    found = scrape(client)
    oldest = {dict(labels)['queue']: value for (name, labels), value in found.items()
              if name == 'kale_queue_oldest_task_age_seconds'}
    assert set(oldest) <= set(memory_broker.queues) | {'other'}
    assert oldest['other'] >= 2999 - 5


def test_the_record_statuses_metrics_know_are_the_records_own():
    from kale.contrib.queue_metrics import RECORD_STATUSES
    from kale.statuses import TaskStatus
    assert RECORD_STATUSES == {status.value for status in TaskStatus}
