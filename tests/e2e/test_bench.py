"""The benchmark suite keeps working: its request counter, and every scenario
with tiny numbers (no timing is asserted here; figures come from `python -m bench`)."""
import json
import socket
import subprocess
import sys
import urllib.parse

import pytest

from bench import records as bench_records
from bench.counter import RequestCounter
from tests.support.endpoint import ROOT, raw_client, subprocess_env

FIGURES = {'publish one by one (tasks/s)', 'publish_batch (tasks/s)',
           'publish_batch speed-up over one by one (x)', 'worker drain (tasks/s)',
           'worker CPU per task (µs)',
           'requests per task, publish_batch', 'requests per task, publish one by one'} | {
    'publish-to-start latency %s (ms), %s long polls' % (p, config)
    for p in ('p50', 'p99') for config in ('equal', 'shipped')} | {
    'idle requests per minute, %s long polls' % config for config in ('equal', 'shipped')}
RECORDS_FIGURES = {bench_records.PUBLISH_SINGLE, bench_records.PUBLISH_BATCH, bench_records.DRAIN,
                   bench_records.CPU, bench_records.RECORDED, bench_records.LAG}


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


#: The SQS endpoint runs each kind of scenario once: the "shipped" long-poll
#: variants run the same code with other queue settings (the memory
#: transport's run below has them).
EQUAL_SCENARIOS = 'publish,drain,latency,idle'


@pytest.mark.slow
def test_every_scenario_runs_on_an_sqs_endpoint(tmp_path, sqs_endpoint):
    table, report = run_bench(tmp_path, '--endpoint-url', sqs_endpoint,
                              '--scenarios', EQUAL_SCENARIOS)
    [configuration] = report['configurations']
    assert {f for f in FIGURES if 'shipped' not in f} | {'worker peak memory (MB)'} \
        == set(configuration['results'])
    for figure, result in configuration['results'].items():
        assert result['kale']['median'] >= 0, figure
        assert figure in table
    assert configuration['results']['worker drain (tasks/s)']['baseline']['median'] > 0
    assert 'Summary' in table and 'drain: Kale' in table
    assert 'drain: raw boto3 loop' in table and 'memory-transport' not in table


@pytest.mark.slow
def test_every_scenario_runs_on_the_memory_transport_and_records_on_beside_off(tmp_path):
    table, report = run_bench(tmp_path, '--transport', 'memory', '--latency-ms', '1',
                              '--records')
    [configuration] = report['configurations']
    results = configuration['results']
    assert FIGURES | RECORDS_FIGURES | {'messages settled past their budget'} == set(results)
    assert results['messages settled past their budget']['kale']['median'] == 0
    assert results[bench_records.RECORDED]['kale']['median'] == 100, 'every task recorded'
    assert 0 <= results[bench_records.LAG]['kale']['median'] < 5000
    for figure in (bench_records.DRAIN, bench_records.PUBLISH_SINGLE, bench_records.PUBLISH_BATCH):
        assert results[figure]['kale']['median'] > 0 and results[figure]['baseline']['median'] > 0
        assert 'ratio' in results[figure] and results[figure]['target'].endswith('x off')
    assert 'drain: records on (off)' in table
    # The baseline here is a plain loop over the memory transport, not boto3.
    assert 'drain: raw memory-transport loop' in table and 'boto3' not in table


def listening(url):
    port = urllib.parse.urlsplit(url).port
    try:
        socket.create_connection(('127.0.0.1', port), timeout=1).close()
    except OSError:
        return False
    return True


@pytest.mark.slow
def test_fauxqs_and_the_latency_proxy_run_and_are_stopped_afterwards(tmp_path, fauxqs_installed):
    table, report = run_bench(tmp_path, '--endpoint', 'fauxqs', '--latency-ms', '0,5',
                              '--scenarios', 'publish,drain')
    without, with_proxy = report['configurations']
    assert without['endpoint'] == without['upstream']
    assert with_proxy['endpoint'] != with_proxy['upstream'] == without['upstream']
    assert with_proxy['results']['worker drain (tasks/s)']['baseline']['median'] > 0
    assert '| +5 ms per request' in table
    assert not listening(with_proxy['upstream']) and not listening(with_proxy['endpoint'])


@pytest.mark.slow
def test_the_metrics_scenario_drains_with_and_without_metrics(tmp_path):
    table, report = run_bench(tmp_path, '--transport', 'memory', '--scenarios', 'drain-metrics')
    [configuration] = report['configurations']
    results = configuration['results']
    assert set(results) == {'worker drain, metrics on (tasks/s; baseline: metrics off)',
                            'worker CPU per task, metrics on (µs; baseline: metrics off)'}
    for result in results.values():
        assert result['kale']['median'] > 0 and result['baseline']['median'] > 0
    assert results['worker drain, metrics on (tasks/s; baseline: metrics off)']['target'] \
        == '>= 0.95 x off'
    assert 'worker drain, metrics on' in table


@pytest.mark.slow
def test_the_asyncio_pools_io_drain_runs_with_records_on_beside_off(tmp_path):
    from bench import pools
    table, report = run_bench(tmp_path, '--transport', 'memory', '--scenarios',
                              pools.IO_RECORDS_SCENARIO, '--io-tasks', '400')
    [configuration] = report['configurations']
    results = configuration['results']
    assert set(results) == {pools.IO_RECORDS_FIGURE,
                            'io-asyncio worker CPU per task, records on (µs; baseline: records off)'}
    for result in results.values():
        assert result['kale']['median'] > 0 and result['baseline']['median'] > 0
    assert results[pools.IO_RECORDS_FIGURE]['target'] == '>= 0.85 x off'
    assert 'records on' in table


def test_an_unknown_scenario_is_refused_with_the_optional_ones_listed():
    from bench.__main__ import parse_args
    with pytest.raises(SystemExit):
        parse_args(['--scenarios', 'nope'])
    assert parse_args(['--scenarios', 'drain-metrics']).scenarios == ['drain-metrics']
