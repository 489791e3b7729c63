"""Real `kale worker` processes serving /metrics over HTTP, scraped on a free port."""
import os
import signal
import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests import tasks
from tests.support.processes import WorkerProcess, wait_for
from tests.support.records import read_records

pytestmark = pytest.mark.slow


def free_port():
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


def scrape(port):
    """{(name, sorted labels): value}, or {} while nothing answers."""
    try:
        with urllib.request.urlopen('http://127.0.0.1:%d/metrics' % port, timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def succeeded(port, task):
    key = ('kale_tasks_total', (('outcome', 'succeeded'), ('queue', 'default'), ('task', task)))
    return scrape(port).get(key, 0)


def test_kale_worker_serves_its_metrics_on_the_metrics_port(sqs, tmp_path):
    tasks.AddTask.publish_batch(None, [((i, 1), {}) for i in range(3)])
    port = free_port()
    worker = WorkerProcess(tmp_path, '--queues', 'default', '--metrics-port', str(port))
    try:
        wait_for(lambda: succeeded(port, 'tests.tasks.AddTask') == 3, 30, 'three successes')
        found = scrape(port)
        assert found[('kale_sqs_requests_total', (('operation', 'ReceiveMessage'),
                                                  ('result', 'ok')))] >= 1
        assert found[('kale_messages_received_total', (('queue', 'default'),))] == 3
    finally:
        worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0, worker.output()
    assert 'serving metrics at http://127.0.0.1:%d/metrics' % port in worker.output()


def test_concurrency_serves_one_endpoint_for_all_its_workers(sqs, record, tmp_path):
    tasks.QuickTask.publish_batch(None, [((i,), {}) for i in range(30)])
    port, temporary = free_port(), tmp_path / 'tmp'
    temporary.mkdir()
    supervisor = WorkerProcess(tmp_path, '--queues', 'default', '--concurrency', '2',
                               '--metrics-port', str(port), TMPDIR=str(temporary))
    try:
        wait_for(lambda: succeeded(port, 'tests.tasks.QuickTask') == 30, 60, '30 successes')
        assert len({r[2] for r in read_records(record) if r[0] == 'ran'}) == 2   # both worked
    finally:
        supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(15) == 0, supervisor.output()
    assert os.listdir(temporary) == []             # the multiprocess directory is gone
