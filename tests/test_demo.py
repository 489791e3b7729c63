"""`make demo` runs start to finish, with the expected outcomes, in under a minute."""
import os
import subprocess
import sys
import time

from tests.conftest import ROOT


def test_make_demo_exits_0_with_the_expected_outcome_counts():
    env = {k: v for k, v in os.environ.items() if not k.startswith('KALE_')}
    started = time.monotonic()
    result = subprocess.run(['make', '--no-print-directory', 'demo', 'VENV=%s' % sys.prefix],
                            cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    rows = {tuple(line.split()[:2]): line.split()[2:] for line in lines
            if line.startswith(('high_priority', 'default', 'low_priority'))}
    assert rows == {('high_priority', 'FibonacciTask'): ['30', '0', '0'],
                    ('default', 'FlakyTask'): ['8', '8', '0'],
                    ('default', 'AlwaysFailsTask'): ['0', '2', '2'],
                    ('low_priority', 'SlowReportTask'): ['4', '0', '0']}
    assert next(line for line in lines if line.startswith('total')).split() == \
        ['total', '42', '10', '2']
    assert 'dead-letter queues now hold: dlq-default 2' in result.stdout
    assert 'done  42 | retried  10 | dead-lettered  2 | remaining   0' in result.stdout
    assert elapsed < 60
