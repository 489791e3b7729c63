"""The chaos run's rate-limit account (bench/chaos.py): the most runs of the
rate-limited task that started within any window, against what the limit
allows; more is a failure of the run."""
from __future__ import annotations

import argparse

from bench.chaos import Chaos


def chaos_with_starts(tmp_path, starts):
    chaos = Chaos(argparse.Namespace(seed=1, pool=None), 'rate-limit')
    chaos.log_path = str(tmp_path / 'tasks.log')
    with open(chaos.log_path, 'w') as f:
        for n, at in enumerate(starts):
            f.write('rated t%d 1 %.3f\n' % (n, at))
    return chaos


def test_starts_at_the_rate_are_within_the_bound(tmp_path):
    starts = [100.0 + n * 0.1 for n in range(200)]          # 10 a second
    chaos = chaos_with_starts(tmp_path, starts)
    assert [(seconds, most) for seconds, most, _ in chaos.rate_windows()] == \
        [(1.0, 10), (2.0, 20), (5.0, 50)]
    assert chaos.over_rate() == []


def test_late_runs_stacked_on_fresh_ones_are_a_failure(tmp_path):
    starts = [100.0 + n * 0.1 for n in range(50)] + [102.5 + n * 0.01 for n in range(30)]
    chaos = chaos_with_starts(tmp_path, starts)
    assert chaos.over_rate()[0] == '40 starts in 1 s (at most 20)'


def test_no_rate_limited_start_no_window(tmp_path):
    assert chaos_with_starts(tmp_path, []).rate_windows() == []
