"""The flow-control benchmarks (bench/flow.py) keep working: tiny runs of
flow-rate and flow-concurrency on the memory transport, and of flow-fleet
(two then four worker processes sharing 20/s) on fauxqs, each
figure printed with its target and plausible. No timing is asserted beyond
the fleet's limit; figures come from `python -m bench --scenarios flow-...`
on fauxqs (bench/README.md)."""
import json
import subprocess
import sys

import pytest

from bench import flow
from kale.flow.bucket import most_starts
from kale.flow.spec import Rate
from tests.support.endpoint import ROOT, subprocess_env

pytestmark = pytest.mark.slow


def run_bench(tmp_path, *args):
    out = tmp_path / 'bench.json'
    env = {k: v for k, v in subprocess_env().items() if not k.startswith('KALE_')}
    result = subprocess.run([sys.executable, '-m', 'bench', '--runs', '1', '--json', str(out),
                             *args], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    [configuration] = json.loads(out.read_text())['configurations']
    return result.stdout, configuration['results']


def median(results, figure, side='kale'):
    return results[figure][side]['median']


def test_a_limit_never_reached_costs_one_transaction_a_batch(tmp_path):
    stdout, results = run_bench(tmp_path, '--transport', 'memory', '--tasks', '200',
                                '--scenarios', 'flow-rate,flow-concurrency')
    for kind, transactions in (('rate', 1), ('concurrency', 2)):
        names = flow.names(kind)
        assert median(results, names['drain']) > 0 < median(results, names['drain'], 'baseline')
        assert results[names['drain']]['target'] == '>= 0.9 x none'
        assert median(results, names['cpu']) > 0
        # The runs of a batch that start within 50 ms ask in one transaction
        # (the concurrency limit gives its slots back in a second one), a few
        # statements each; the first batch of a queue, whose run times are
        # not known yet, asks run by run (200 tasks: 0.13-0.24 a task; a
        # loaded machine, whose runs start further apart, 0.32). Asking run by
        # run would cost a transaction a task: the bound is half that.
        asked = median(results, names['transactions'])
        assert 0.9 * transactions / 10 <= asked <= transactions / 2
        # A few statements a transaction (a loaded machine runs more batches
        # run by run: 0.24 transactions and 1.2 requests a task seen).
        assert 0 < median(results, names['requests']) <= 6 * asked
        assert names['drain'] in stdout


@pytest.mark.real_time('runs a second, counted on the machine\'s clock by the benchmark')
def test_a_fleet_of_two_then_four_keeps_within_the_shared_rate(tmp_path, fauxqs_installed):
    """On fauxqs: the embedded endpoint refuses and releases the backlog so
    slowly that the runs of reserved tokens come back only after the window."""
    stdout, results = run_bench(tmp_path, '--endpoint', 'fauxqs', '--scenarios', 'flow-fleet',
                                '--flow-seconds', '4')
    for workers in (2, 4):
        figure = flow.fleet_figure(workers)
        assert median(results, figure, 'baseline') == flow.FLEET_RATE
        # never over what the bucket allows in any 4 s (its burst is spent
        # in the warm-up); two loaded cores may keep it under
        most = most_starts(Rate(flow.FLEET_RATE, 1.0), 4) / 4
        assert 0 < median(results, figure) <= most
        assert results[figure]['target'] == 'within 5 %'
        assert figure in stdout
