"""Topics through the real commands on moto's SNS and SQS and on fauxqs:
`kale topics sync` creates the topic, subscriptions and queue policies,
`kale topics list` shows them, events published from this process reach each
subscriber's queue, and a real worker runs every copy (one retried, one
filtered by label)."""
import json
import signal
import subprocess
import sys

import pytest

from kale import topics
from tests.support.endpoint import ROOT, subprocess_env
from tests.support.processes import WorkerProcess, wait_for
from tests.support.unavailable import unavailable

pytestmark = pytest.mark.slow

ENV = {'KALE_TEST_TASK_MODULES': 'tests.topic_tasks', 'KALE_TEST_RETRY_DELAY': '0'}


@pytest.fixture(params=['moto', 'fauxqs'])
def endpoint(request, sqs, monkeypatch, settings_env):
    """The endpoint of this test's queues and topics: moto's (the sqs
    fixture's) or a fauxqs of its own."""
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    if request.param == 'fauxqs':
        from bench.servers import BenchError, Fauxqs
        server = Fauxqs()
        try:
            url = server.start()
        except BenchError as exc:
            unavailable('fauxqs is not available: %s' % exc)
        monkeypatch.setenv('KALE_TEST_ENDPOINT', url)
        settings_env()
        yield url
        server.stop()
    else:
        settings_env()
        yield sqs.url


def kale(*args, **env):
    return subprocess.run([sys.executable, '-m', 'kale', *args], cwd=ROOT,
                          env=subprocess_env(**env), capture_output=True, text=True, timeout=60)


def test_sync_list_publish_and_a_worker_runs_every_copy(endpoint, tmp_path):
    before = kale('topics', 'list')
    assert before.returncode == 0, before.stderr
    assert 'no topic' in before.stdout
    synced = kale('topics', 'sync')
    assert synced.returncode == 0, synced.stderr
    assert 'subscribed: orders -> tests.topic_tasks.AcmeAudit on queue low (labels tenant=acme)' \
        in synced.stdout
    assert kale('topics', 'sync').stdout == synced.stdout          # idempotent
    listed = json.loads(kale('topics', 'list', '--json').stdout)
    orders = next(topic for topic in listed if topic['topic'] == 'orders')
    assert len(orders['subscriptions']) == 3
    assert {sub['queue'] for sub in orders['subscriptions']} == {
        sub['sqs_name'] for sub in orders['subscribers']}

    out = tmp_path / 'runs'
    topics.publish('orders', {'out': str(out), 'n': 0}, labels={'tenant': 'acme'})
    topics.publish_batch('orders', [{'out': str(out), 'n': n} for n in (1, 2)],
                         labels={'tenant': 'globex'})
    expected = sorted(['acme 0'] + ['%s %d' % (who, n) for n in range(3)
                                    for who in ('mail', 'stock-attempt-1', 'stock-attempt-2')])
    worker = WorkerProcess(tmp_path, '--queues', 'default,high,low', endpoint=endpoint)
    try:
        wait_for(lambda: out.exists() and sorted(out.read_text().splitlines()) == expected, 60,
                 'every subscriber to run its copies')
    finally:
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0


def test_sync_without_task_modules_says_so_in_one_line(sqs):
    done = kale('topics', 'sync', KALE_TEST_TASK_MODULES='')
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        'kale: error: TASK_MODULES is empty: name the modules of your subscriber task classes '
        'there (subscribers are found by importing them)']
