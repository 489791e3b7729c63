"""The chaos run's ``workflows`` scenario: chains and chords on workers
killed every few seconds while they run (see bench/chaos.py).

Each workflow has about WORKFLOW_NODES nodes (``--workflow-nodes``) of
:class:`~bench.chaos_tasks.ChaosStepTask` (0.5-2 s each, awaited): a chord
(a group of steps, then a join) or a chain (a step, a group of steps, a
join, a step). The run submits them in waves, as the other scenarios publish
tasks, with task records on (workflows keep their state there) and asyncio
workers unless ``--pool`` says otherwise, each holding up to 100 tasks at
once; a worker is killed with kill -9 every 1.5-4 s, and the task that kills
its own worker is published too. The account adds:

- workflows finished: every workflow must have succeeded;
- joins run more than once: a join is published once by its workflow, so it
  runs once; a run again is allowed only after a run whose worker was killed
  before it settled it (as at-least-once delivery allows any task), and any
  other second run fails the scenario;
- recovery: from the end of the faults (and from the last kill the run
  made) to the last workflow finished;
- nodes republished: the nodes workers' sweeps published again (their
  ``publishing N workflow nodes left unpublished`` lines), and nodes run
  more than once (a node's task completed twice), those whose earlier run
  was settled apart (the others' worker was killed before it settled
  them, which at-least-once delivery allows);
- send-backs: the messages the workers gave back unrun as fresh copies
  (their ``released`` log lines), and how many of those were suspects (a
  message a worker died holding, released to be run later, see
  kale/worker/suspects.py).
"""
from __future__ import annotations

import collections
import datetime
import glob
import os
import random
import re
import time
from typing import Any, Optional

#: Nodes in each workflow, about.
WORKFLOW_NODES = 50
#: A worker's first line: its identity (host:pid@start) serves its queues.
SERVING = re.compile(r'worker \S+:(\d+)@\S+: serving queues ')
#: What a worker's sweep logs when it publishes nodes again (kale.workflow.run, logger kale.workflow.sweep).
REPUBLISHED = re.compile(r'publishing (\d+) workflow nodes left unpublished')
#: What a release of a suspect says (kale/worker/suspects.py).
SUSPECT_REASONS = ('left unsettled', 'suspect', 'last receive')


class Workflows:
    """The workflows a run submitted, and their account."""

    def __init__(self, rng: random.Random, nodes: int = WORKFLOW_NODES):
        self.rng = rng
        self.nodes = nodes
        self.ids: list[str] = []
        self.joins: set[str] = set()
        self.node_ids: set[str] = set()

    def submit(self, count: int, kinds: dict[str, str]) -> None:
        """Submit workflows of about ``self.nodes`` nodes each, ``count``
        nodes in all; each node's task id goes into ``kinds`` (step or join)."""
        from bench.chaos_tasks import ChaosJoinTask, ChaosStepTask
        from kale import workflow
        flows = max(1, round(count / self.nodes))
        for _ in range(flows):
            width = max(2, count // flows - 3)
            steps = workflow.group(*[ChaosStepTask.s(i) for i in range(width)])
            if len(self.ids) % 2:
                flow = workflow.chain(ChaosStepTask.s(0), steps, ChaosJoinTask.s(),
                                      ChaosStepTask.s())
            else:
                flow = workflow.chord(steps, ChaosJoinTask.s())
            submitted = workflow.submit(flow, labels={'chaos': 'workflows'})
            self.ids.append(submitted.id)
            for node in submitted.nodes():
                joins = node['task'].endswith('ChaosJoinTask')
                kinds[node['task_id']] = 'join' if joins else 'step'
                self.node_ids.add(node['task_id'])
                if joins:
                    self.joins.add(node['task_id'])

    def finished_at(self) -> Optional[dict[str, tuple[str, float]]]:
        """Each workflow's status and when it finished (0 while running)."""
        from kale import workflow
        found = {row['id']: (row['status'], _epoch(row['finished_at']))
                 for row in workflow.list_workflows(limit=1000)}
        return {workflow_id: found.get(workflow_id, ('missing', 0.0)) for workflow_id in self.ids}

    def all_finished(self) -> bool:
        states = self.finished_at() or {}
        return all(status != 'running' for status, _ in states.values())

    def account(self, lines: list[list[str]], last_kill: float, faults_ended: float,
                workdir: str, wait_sec: float = 30.0) -> dict[str, Any]:
        """The scenario's own lines, and its failures under ``_failures``
        (``last_kill`` and ``faults_ended``: epoch times)."""
        deadline = time.monotonic() + wait_sec      # the last node's end moves its workflow on
        states = self.finished_at() or {}
        while any(s == 'running' for s, _ in states.values()) and time.monotonic() < deadline:
            time.sleep(0.5)
            states = self.finished_at() or {}
        runs: dict[str, list[int]] = collections.defaultdict(list)    # join -> pids, in order
        completions: dict[str, list[int]] = collections.defaultdict(list)   # node -> pids
        for line in lines:
            if line[0] == 'join':
                runs[line[1]].append(int(line[2]))
            elif line[0] == 'done' and line[1] in self.node_ids:
                completions[line[1]].append(int(line[2]))
        settled = settled_by_worker(workdir)
        twice = sorted(task_id for task_id, pids in runs.items() if len(pids) > 1)
        unexplained = sorted(task_id for task_id in twice
                             if any(task_id in settled.get(pid, ()) for pid in runs[task_id][:-1]))
        again = [task_id for task_id, pids in completions.items() if len(pids) > 1]
        after_settled = [task_id for task_id in again        # not a kill's at-least-once
                         if any(task_id in settled.get(pid, ()) for pid in completions[task_id][:-1])]
        unfinished = sorted(wid for wid, (status, _) in states.items() if status != 'succeeded')
        last_finished = max((at for _, at in states.values()), default=0.0)
        if unfinished:          # still running: recovery is longer than the run lasted
            last_finished = time.time()
        released, suspects = send_backs(workdir)
        recovery = round(max(0.0, last_finished - faults_ended), 1)
        return {
            'workflows finished': '%d / %d' % (len(self.ids) - len(unfinished), len(self.ids)),
            'workflow joins run more than once': '%d / %d (%d after a kill before it settled)'
                                                 % (len(twice), len(self.joins),
                                                    len(twice) - len(unexplained)),
            'workflow nodes republished by a sweep': republished(workdir),
            'workflow nodes run more than once': len(again),
            'workflow nodes run again after a run that settled': len(after_settled),
            'workflow nodes': len(self.node_ids),
            'recovery (s): faults\' end to last workflow finished': recovery,
            'recovery (s): last kill to last workflow finished': '-' if not last_kill else
                ('%s%.1f' % ('> ' if unfinished else '', max(0.0, last_finished - last_kill))),
            'send-backs (messages released unrun)': released,
            'send-backs of suspects': suspects,
            '_failures': {'workflows_unfinished': ['%s: %s' % (wid, states[wid][0])
                                                   for wid in unfinished],
                          'joins_run_twice': unexplained},
        }


def settled_by_worker(workdir: str) -> dict[int, set[str]]:
    """The task ids each worker (by pid) reported settled as succeeded."""
    found: dict[int, set[str]] = {}
    for path in glob.glob(os.path.join(workdir, 'worker-*.log')):
        pid, ids = 0, set()
        with open(path, errors='replace') as f:
            for line in f:
                started = SERVING.search(line) if not pid else None
                if started:
                    pid = int(started.group(1))
                elif ') on ' in line and ' succeeded in ' in line and ' task ' in line:
                    ids.add(line.split(' task ', 1)[1].split(' ', 1)[0])
        found[pid] = ids
    return found


def republished(workdir: str) -> int:
    """The workflow nodes the workers' sweeps published again (their publisher
    died, or, before publish claims, was merely slow)."""
    found = 0
    for path in glob.glob(os.path.join(workdir, 'worker-*.log')):
        with open(path, errors='replace') as f:
            for line in f:
                sweep = REPUBLISHED.search(line)
                if sweep:
                    found += int(sweep.group(1))
    return found


def send_backs(workdir: str) -> tuple[int, int]:
    """Releases the workers logged (each a fresh copy sent back unrun), and
    how many of them were suspects'."""
    released = suspects = 0
    for path in glob.glob(os.path.join(workdir, 'worker-*.log')):
        with open(path, errors='replace') as f:
            for line in f:
                if ' released: ' in line:
                    released += 1
                    reason = line.split(' released: ', 1)[1]
                    suspects += any(word in reason for word in SUSPECT_REASONS)
    return released, suspects


def _epoch(iso: Optional[str]) -> float:
    return datetime.datetime.fromisoformat(iso).timestamp() if iso else 0.0
