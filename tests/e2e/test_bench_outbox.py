"""The outbox benchmarks (bench/outbox.py) keep working: tiny runs of
outbox-relay, outbox-lag, outbox-lag-poll and outbox-publish on the embedded
endpoint, on the benchmark's own throwaway PostgreSQL cluster and on SQLite,
each figure printed with its target and plausible (no timing is asserted
here; figures come from `python -m bench --scenarios outbox-...` on fauxqs)."""
import json
import subprocess
import sys

import pytest

from bench import outbox
from bench.servers import BenchError
from tests.support.endpoint import ROOT, subprocess_env
from tests.support.unavailable import unavailable

TASKS, RATE = 120, 40.0
LAG = outbox.lag_figure_names(False, RATE)
POLL = outbox.lag_figure_names(True, RATE)


def run_bench(tmp_path, *args):
    out = tmp_path / 'bench.json'
    env = {k: v for k, v in subprocess_env().items() if not k.startswith('KALE_')}
    result = subprocess.run([sys.executable, '-m', 'bench', '--runs', '1', '--json', str(out),
                             '--outbox-tasks', str(TASKS), '--outbox-rate', str(RATE),
                             '--outbox-seconds', '1', '--outbox-transactions', '20', *args],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout, result.stderr, json.loads(out.read_text())


def median(results, figure, side='kale'):
    return results[figure][side]['median']


def check_relay_and_publish(results):
    assert median(results, outbox.RELAY) > 0 and median(results, outbox.RELAY, 'baseline') > 0
    assert results[outbox.RELAY]['target'] == '>= 0.8 x publish_batch'
    assert 'met' in results[outbox.RELAY] and results[outbox.RELAY]['ratio'] > 0
    # Both send SendMessageBatch requests of 10: one request per 10 tasks.
    assert median(results, outbox.RELAY_REQUESTS) == pytest.approx(0.1)
    assert median(results, outbox.RELAY_REQUESTS, 'baseline') == pytest.approx(0.1)
    assert median(results, outbox.FILL) > 0
    # A transaction with a publish takes longer than one without, by milliseconds at most.
    assert median(results, outbox.TRANSACTION) > 0 < median(results, outbox.TRANSACTION, 'baseline')
    assert -5 < median(results, outbox.PUBLISH_COST) < 50
    assert median(results, outbox.PUBLISH_COST, 'baseline') > 0
    assert results[outbox.PUBLISH_COST]['target'] == '<= 0.5'
    assert median(results, outbox.BATCH_COST, 'baseline') > 0


def check_lag(results, names, target):
    p50, p99 = median(results, names['p50']), median(results, names['p99'])
    assert 0 <= p50 <= p99 < 10000
    assert 0.5 * RATE < median(results, names['rate']) < 1.5 * RATE
    assert median(results, names['cpu']) >= 0
    assert ('target' in results[names['p50']]) is target


@pytest.mark.slow
def test_the_outbox_scenarios_on_a_throwaway_postgresql_cluster(tmp_path, sqs_endpoint):
    try:
        outbox.pg_binaries()
    except BenchError as exc:
        unavailable(str(exc))
    table, log, report = run_bench(
        tmp_path, '--endpoint-url', sqs_endpoint, '--scenarios',
        'outbox-relay,outbox-lag,outbox-lag-poll,outbox-publish')
    results = report['configurations'][0]['results']
    check_relay_and_publish(results)
    check_lag(results, LAG, True)
    check_lag(results, POLL, False)
    assert results[LAG['p50']]['target'] == '<= 20' and results[LAG['p99']]['target'] == '<= 100'
    for figure in results:
        assert figure in table
    assert 'Outbox (medians' in table and 'throwaway cluster' in table
    assert 'lag p50, LISTEN/NOTIFY' in table and 'lag p99, poll only' in table
    # Where the time went, from the relays' own rounds.
    assert 'bench: outbox-relay: ' in log and 'rounds with rows' in log
    assert 'bench: outbox-lag: per task' in log and 'commit to round start' in log
    assert report['outbox']['tasks'] == TASKS and report['outbox']['rate'] == RATE


@pytest.mark.slow
def test_the_outbox_scenarios_on_sqlite(tmp_path, sqs_endpoint):
    table, _, report = run_bench(tmp_path, '--endpoint-url', sqs_endpoint, '--outbox-url',
                                 'sqlite', '--scenarios',
                                 'outbox-relay,outbox-lag-poll,outbox-publish')
    results = report['configurations'][0]['results']
    check_relay_and_publish(results)
    check_lag(results, POLL, False)
    assert 'a fresh SQLite file a run' in table


def test_the_outbox_scenarios_need_the_sqs_transport_and_sane_sizes():
    from bench.__main__ import parse_args
    for argv in (['--transport', 'memory', '--scenarios', 'outbox-relay'],
                 ['--scenarios', 'outbox-lag', '--outbox-url', 'sqlite'],
                 ['--scenarios', 'outbox-lag', '--outbox-rate', '0'],
                 ['--scenarios', 'outbox-publish', '--outbox-transactions', '0']):
        with pytest.raises(SystemExit):
            parse_args(argv)
    args = parse_args(['--scenarios', 'outbox-relay,outbox-lag'])
    assert (args.outbox_tasks, args.outbox_rate, args.outbox_seconds) == (5000, 200.0, 10.0)
    assert 'outbox-relay' not in parse_args([]).scenarios      # run only when named


def test_the_targets_are_the_issues():
    targets = outbox.targets(200.0)
    relay = targets[outbox.RELAY][1]
    assert relay(80.0, 100.0) and not relay(79.0, 100.0) and not relay(80.0, None)
    names = outbox.lag_figure_names(False, 200.0)
    assert targets[names['p50']][1](20.0, None) and not targets[names['p50']][1](20.1, None)
    assert targets[names['p99']][1](100.0, None) and not targets[names['p99']][1](101.0, None)
    assert targets[outbox.PUBLISH_COST][1](0.5, 9.0) and not targets[outbox.PUBLISH_COST][1](0.51, 9.0)
    assert outbox.lag_figure_names(True, 200.0)['p50'] not in targets


def test_a_tasks_lag_is_split_by_the_relays_rounds():
    committed = {'a': 10.000, 'b': 10.004}
    sent = {'a': 10.020, 'b': 10.020}
    rounds = {'rounds': [{'start': 10.005, 'claimed': 10.007, 'sent': 10.022, 'end': 10.025,
                          'tasks': ['a', 'b']}], 'empty': 2, 'empty_seconds': 0.003}
    text = outbox.lag_breakdown(committed, sent, rounds)
    assert 'commit to round start 1.0/5.0' in text
    assert 'claim 2.0/2.0' in text and 'send (request returned) 15.0/15.0' in text
    assert '1 rounds with rows (2.0 rows each)' in text and '2 empty rounds (3 ms in all)' in text
