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


def flows_run(tmp_path, states, lines, worker_logs):
    """The workflows scenario's account of a run: its workflows' ``states``
    (id -> status, finished at), the task log's ``lines``, each worker's log."""
    import random

    from bench.chaos_workflows import Workflows
    flows = Workflows(random.Random(1), nodes=5)
    flows.ids = list(states)
    flows.joins = {'j1', 'j2'}
    flows.node_ids = {'s1', 's2', 's3', 'j1', 'j2'}
    flows.finished_at = lambda: states
    for number, text in enumerate(worker_logs):
        (tmp_path / ('worker-%d.log' % number)).write_text(text)
    return flows.account([line.split() for line in lines], last_kill=90.0, faults_ended=100.0,
                         workdir=str(tmp_path), wait_sec=0)


SWEPT = ('INFO kale.workflow.sweep: publishing 3 workflow nodes left unpublished (their '
         "publisher's claim lapsed): s1 s2 s3\n")


def test_the_workflows_account_counts_republished_nodes_and_nodes_run_twice(tmp_path):
    settled = 'worker h:11@t: serving queues chaos_default\nx) on y task s3 succeeded in 1s\n'
    report = flows_run(tmp_path, {'w1': ('succeeded', 112.5), 'w2': ('succeeded', 104.0)},
                       ['done s1 10 1.0', 'done s1 11 2.0', 'done s2 10 1.0', 'join j1 10 3.0',
                        'done j1 10 3.0', 'done other 10 1.0', 'done other 11 1.0',
                        'done s3 11 1.0', 'done s3 12 2.0'],
                       [SWEPT, 'nothing\n' + SWEPT.replace(' 3 ', ' 2 '), settled])
    assert report.pop('_failures') == {'workflows_unfinished': [], 'joins_run_twice': []}
    assert report['workflow nodes republished by a sweep'] == 5
    assert report['workflow nodes run more than once'] == 2        # s1, s3 (other is no node)
    assert report['workflow nodes run again after a run that settled'] == 1       # s3
    assert report["recovery (s): faults' end to last workflow finished"] == 12.5
    assert report['recovery (s): last kill to last workflow finished'] == '22.5'
    assert report['workflows finished'] == '2 / 2'


def test_a_join_run_again_after_it_settled_or_a_workflow_unfinished_fails_the_run(tmp_path):
    settled = 'worker h:10@t: serving queues chaos_default\nx) on y task j2 succeeded in 1s\n'
    report = flows_run(tmp_path, {'w1': ('running', 0.0), 'w2': ('succeeded', 104.0)},
                       ['join j2 10 1.0', 'join j2 11 2.0', 'join j1 12 1.0', 'join j1 13 2.0'],
                       [settled])
    failures = report.pop('_failures')
    assert failures == {'workflows_unfinished': ['w1: running'], 'joins_run_twice': ['j2']}
    assert report['workflow joins run more than once'] == '2 / 2 (1 after a kill before it settled)'
    from bench.chaos import workflow_row
    row = workflow_row('workflows', report, {'workflows_unfinished': ['w1: running']})
    assert row[:6] == ['workflows', '1/2', '5', '0', '0 (0)', '2'] and row[-1] == 'FAIL'
    assert row[6].startswith('> ')
