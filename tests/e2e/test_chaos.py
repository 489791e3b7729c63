"""A bounded chaos run: kills, stops, outages, hostile messages and a task that
kills its worker, under load. Fails on any lost task, unexpected worker crash,
executed hostile payload, or hostile message not dead-lettered. The workers
run every pool (--pool mixed: serial, threads and asyncio in turn)."""
import json
import os
import subprocess
import sys

import pytest

from tests.support.endpoint import ROOT

pytestmark = pytest.mark.slow


def test_a_bounded_chaos_run_loses_nothing(tmp_path):
    report_path = tmp_path / 'chaos.json'
    env = {k: v for k, v in os.environ.items() if not k.startswith('KALE_')}
    env['PYTHONPATH'] = ROOT
    result = subprocess.run([sys.executable, '-m', 'bench.chaos', '--scenarios', 'kills',
                             '--tasks', '80', '--workers', '3', '--pool', 'mixed',
                             '--duration', '25', '--seed', '4',
                             '--json', str(report_path)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(report_path.read_text())['kills']
    assert report['failures'] == {}
    assert report['tasks lost'] == 0
    assert report['worker crashes other than injected'] == 0
    assert report['files created by hostile pickles'] == 0
    assert report['killer task dead-lettered by the redrive policy'] is True
    hostile_dead, hostile_sent = map(int, report['hostile messages dead-lettered'].split(' / '))
    assert hostile_dead == hostile_sent > 0
    assert report['faults injected'].get('kill -9', 0) + report['faults injected'].get(
        'outage', 0) > 0


def test_throttling_lost_answers_and_partial_batches_lose_nothing(tmp_path):
    """The fault proxy's scenarios, short: throttling and server errors,
    answers lost or cut after the request was applied, partial batch
    failures, latency spikes; none may lose or wrongly dead-letter a task,
    and every task's record (SQLite) must say what happened to it."""
    report_path = tmp_path / 'chaos.json'
    env = {k: v for k, v in os.environ.items() if not k.startswith('KALE_')}
    env['PYTHONPATH'] = ROOT
    result = subprocess.run([sys.executable, '-m', 'bench.chaos', '--scenarios', 'all',
                             '--tasks', '80', '--workers', '3', '--pool', 'mixed',
                             '--duration', '15', '--seed', '5',
                             '--drain-timeout', '60', '--records', 'sqlite',
                             '--json', str(report_path)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(report_path.read_text())['all']
    assert report['failures'] == {}
    assert report['tasks lost'] == 0 and report['tasks dead-lettered that should have completed'] == 0
    assert report['records wrong'] == 0
    met = report['faults met by requests']
    assert sum(met.values()) > 0, met
    assert 'scenario' in result.stdout and 'PASS' in result.stdout
