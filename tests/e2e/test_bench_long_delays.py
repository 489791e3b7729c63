"""The long-delay benchmark (bench/long_delays.py) keeps working: a tiny run,
its figures the ones the README quotes (a receive, a send and a delete per
early arrival of a task that waits alone, 96 arrivals a day; copies that
arrive together share them), every task run once, on time."""
import re
import subprocess
import sys

import pytest

from tests.support.endpoint import ROOT, subprocess_env


@pytest.mark.slow
def test_a_tiny_run_counts_three_requests_per_early_arrival():
    env = {k: v for k, v in subprocess_env().items() if not k.startswith('KALE_')}
    result = subprocess.run([sys.executable, '-m', 'bench.long_delays', '--tasks', '1',
                             '--days', '0.5'], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    counts = re.search(r'([\d.]+) receives \(with messages\), ([\d.]+) sends, ([\d.]+) deletes',
                       result.stdout)
    assert counts is not None, result.stdout
    # 48 arrivals in half a day, 47 of them early: about 94 of each a task a day.
    assert all(90 <= float(value) <= 97 for value in counts.groups()), result.stdout
    late = re.search(r'ran (-?[\d.]+) to ([\d.]+) s after its due time; every task ran once: '
                     r'True', result.stdout)
    assert late is not None and 0 <= float(late.group(1)) and float(late.group(2)) <= 2, \
        result.stdout
