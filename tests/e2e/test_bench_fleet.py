"""The fleet benchmark (bench/fleet_scale.py) keeps working: a tiny run of
one and two workers on fauxqs with records, workflows and a rate limit on a
throwaway PostgreSQL, each per-task cost reported and plausible. No timing
is asserted; figures come from `python -m bench --scenarios fleet` on
fauxqs +10 ms (bench/README.md, docs/capacity.md)."""
import json
import subprocess
import sys

import pytest

from bench import fleet_scale
from tests.support.endpoint import ROOT, subprocess_env
from tests.support.postgres import find_binaries
from tests.support.unavailable import unavailable

pytestmark = pytest.mark.slow


def test_a_small_fleet_reports_its_costs_per_task(tmp_path, fauxqs_installed):
    if find_binaries() is None:
        unavailable('PostgreSQL is not installed (no initdb/pg_ctl): the fleet benchmark '
                    'keeps its records in it')
    out = tmp_path / 'bench.json'
    env = {k: v for k, v in subprocess_env().items() if not k.startswith('KALE_')}
    result = subprocess.run(
        [sys.executable, '-m', 'bench', '--endpoint', 'fauxqs', '--scenarios', 'fleet',
         '--fleet-workers', '1,2', '--fleet-tasks', '200', '--runs', '1', '--json', str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.read_text())
    [configuration] = report['configurations']
    results = configuration['results']
    median = {figure: value['kale']['median'] for figure, value in results.items()
              if value['kale']}
    for size in (1, 2):
        names = fleet_scale.names(size)
        assert median[names['rate']] > 0 and median[names['cpu']] > 0
        assert median[names['pg_cpu']] > 0
        # a receive and a delete per batch of up to ten, the callbacks' sends
        assert 0.1 <= median[names['sqs']] < 1
        # a batch's records, workflow step and flow ask: a few transactions a batch
        assert 0.05 < median[names['transactions']] < 1
        assert 0.5 < median[names['round_trips']] < 5
        assert median[names['wal']] > 100
        if 'pg_stat_statements' in report['fleet']['database'] \
                and 'no pg_stat_statements' not in report['fleet']['database']:
            assert median[names['statements']] >= median[names['round_trips']] / 2
    # the backlog: 2 chords of 100, sent ten a request, each recorded
    assert median[fleet_scale.names(1)['submit_sqs']] == pytest.approx(20 / 202, abs=0.01)
    assert median[fleet_scale.names(1)['submit_transactions']] > 0
    assert 'Fleet (medians of 1 runs' in result.stdout
    assert 'CPU per task says what a core buys' in result.stdout
    assert 'SQS working: ReceiveMessage' in result.stderr
