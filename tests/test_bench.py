"""The benchmark suite keeps working: its request counter, and every scenario
with tiny numbers (no timing is asserted here; figures come from `python -m bench`)."""
import json
import subprocess
import sys

from bench.counter import RequestCounter
from tests.support.endpoint import ROOT, raw_client, subprocess_env

FIGURES = {'publish one by one (tasks/s)', 'publish_batch (tasks/s)',
           'publish_batch speed-up over one by one (x)', 'worker drain (tasks/s)',
           'requests per task, publish_batch', 'requests per task, publish one by one',
           'publish-to-start latency p50 (ms)', 'publish-to-start latency p99 (ms)',
           'idle requests per minute, 3 empty queues'}


def test_the_counter_counts_every_request_a_client_sends(sqs_endpoint):
    client = raw_client(sqs_endpoint)
    counter = RequestCounter().attach(client)
    url = client.create_queue(QueueName='counted')['QueueUrl']
    client.send_message(QueueUrl=url, MessageBody='x')
    client.receive_message(QueueUrl=url)
    assert counter.by_operation() == {'CreateQueue': 1, 'SendMessage': 1, 'ReceiveMessage': 1}
    start = counter.events[1][0]
    assert counter.between(start) == 2
    counter.detach()
    client.receive_message(QueueUrl=url)
    assert counter.total == 3


def test_the_counter_takes_reports_from_the_memory_transport():
    from kale.transport.memory import MemoryTransport
    counter = RequestCounter()
    transport = MemoryTransport(on_request=counter.record)
    transport.ensure_queue('q', 30, None, 0)
    assert counter.by_operation() == {'CreateQueue': 1}


def run_bench(tmp_path, *args):
    out = tmp_path / 'bench.json'
    env = {k: v for k, v in subprocess_env().items() if not k.startswith('KALE_')}
    env['PYTHONPATH'] = subprocess_env()['PYTHONPATH']
    result = subprocess.run([sys.executable, '-m', 'bench', '--tasks', '12', '--runs', '1',
                             '--latency-samples', '2', '--idle-window', '1', '--json', str(out),
                             *args], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout, json.loads(out.read_text())


def test_every_scenario_runs_on_an_sqs_endpoint(tmp_path, sqs_endpoint):
    table, report = run_bench(tmp_path, '--endpoint-url', sqs_endpoint)
    assert FIGURES | {'worker peak memory (MB)'} == set(report['results'])
    for figure, result in report['results'].items():
        assert result['kale']['median'] >= 0, figure
        assert figure in table
    assert report['results']['worker drain (tasks/s)']['baseline']['median'] > 0


def test_every_scenario_runs_on_the_memory_transport(tmp_path):
    _table, report = run_bench(tmp_path, '--transport', 'memory', '--latency-ms', '1')
    assert FIGURES | {'messages settled past their budget'} == set(report['results'])
    assert report['results']['messages settled past their budget']['kale']['median'] == 0
