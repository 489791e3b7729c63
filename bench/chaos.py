"""`python -m bench.chaos`: load, random faults, and an account of every task.

It starts the embedded endpoint behind two proxies it controls (a TCP proxy
it can take down, in front of the fault-injecting HTTP proxy of
bench/faults.py), feeds N tasks over three priority queues, runs W
`kale worker` processes, and for a bounded time injects the faults of each
scenario at random:

``kills``          kill -9 and SIGTERM of workers (each replaced), endpoint
                   outages of 1-5 s, hostile messages sent with raw boto3
                   (garbage, a wrong signature, a pickle that would create a
                   file, an unknown task, an oversized body, a replayed or
                   misdirected body), and a task that kills its own worker
``throttle``       bursts of ThrottlingException / RequestThrottled and of
                   500/503 answers, on any call
``lost-answers``   answers lost or cut after the request was applied, on any
                   call and especially SendMessageBatch, DeleteMessageBatch
                   and ChangeMessageVisibilityBatch
``latency``        latency spikes of 2-5 s
``partial-batch``  batch sends, deletes and visibility changes with some
                   entries failed
``fifo``           kill -9 and SIGTERM of workers and lost answers while a FIFO
                   queue's groups run; each group must keep its order (needs
                   ``--endpoint fauxqs``: moto breaks FIFO order by itself
                   when a group's in-flight messages time out together)
``heartbeat``      tasks longer than their queue's visibility timeout, while the
                   visibility extensions meet throttling, errors and lost
                   answers, and workers are killed
``records-outage`` the task-records database stopped for 2-6 s and started
                   again (PostgreSQL with ``--records postgres``), or, on
                   SQLite, locked by another writer for 2-6 s
``workflows``      chains and chords on asyncio workers (unless ``--pool``
                   says otherwise), a worker killed with kill -9 every
                   1.5-4 s while they run, and the task that kills its
                   worker; every workflow must finish, no join may run
                   twice, and the run prints the recovery time (from the
                   last kill to the last workflow finished) and the
                   send-backs (see bench/chaos_workflows.py)
``rate-limit``     tasks under ``rate_limit = '10/s'`` (records in SQLite unless
                   ``--records`` says otherwise), kill -9 and SIGTERM of workers and
                   lost settling answers: the copies a killed worker held, and runs
                   refused earlier, come back late; in no window of 1, 2 or 5 s may
                   more runs start than the limit allows (``most_starts``)
``all``            all of the above at once (but the records outage and the rate limit)

The run publishes through the fault proxy too, retrying a publish that
raised with the same task ids. Among the tasks are ones that raise, ones
that run past their time limit and ones that always fail. Then it lets the
workers finish, and prints what happened to every task and message, then a
table of the scenarios. It exits 1 if anything that must be zero is not.

    python -m bench.chaos                         # every scenario, 600 tasks, 90 s of faults each
    python -m bench.chaos --scenarios throttle,lost-answers --tasks 120 --duration 20 --seed 3
"""
from __future__ import annotations

import argparse
import base64
import collections
import dataclasses
import json
import os
import pickle
import random
import sys
import tempfile
import time
import uuid
from typing import Any, Optional, Sequence
from urllib.parse import urlparse

from bench.chaos_workflows import Workflows
from bench.faults import FaultProxy
from bench.fleet import Fleet
from bench.raw import boto3_client
from kale.app import default_app
from kale.cli.sqs_local import SQSLocalProcess
from kale.conf import settings
from tests.support.tcp_proxy import TCPProxy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUEUES = ['chaos_high', 'chaos_default', 'chaos_low', 'chaos_ordered']
#: The pools a worker may run (kale worker --pool).
POOLS = ['serial', 'threads', 'asyncio']
HOSTILE_KINDS = ['garbage', 'wrong_signature', 'pickle', 'unknown_task', 'oversized', 'replayed',
                 'other_queue']
DAY = 24 * 3600.0
#: What each scenario injects: actions drawn at random, one every 1.5-4 s.
SCENARIOS: dict[str, list[str]] = {
    'kills': ['kill -9', 'SIGTERM', 'outage', 'hostile', 'hostile'],
    'throttle': ['throttle', 'server_error'],
    'lost-answers': ['lost_answer', 'cut_answer', 'lost_answer settling'],
    'latency': ['slow'],
    'partial-batch': ['partial_batch'],
}
SCENARIOS['all'] = [action for actions in SCENARIOS.values() for action in actions]
SCENARIOS['heartbeat'] = ['heartbeat fault', 'heartbeat fault', 'kill -9']
SCENARIOS['fifo'] = ['kill -9', 'SIGTERM', 'lost_answer settling', 'partial_batch']
SCENARIOS['records-outage'] = ['records outage', 'kill -9']
SCENARIOS['workflows'] = ['kill -9']
SCENARIOS['rate-limit'] = ['kill -9', 'kill -9', 'SIGTERM', 'lost_answer settling']
#: The rate-limit scenario's limit (ChaosRateTask.rate_limit), and the windows checked.
RATE_LIMIT = '10/s'
RATE_WINDOWS_SEC = (1.0, 2.0, 5.0)
#: The kinds of task that must end by completing.
FINISHING = ('ok', 'flaky', 'slow', 'long', 'step', 'join')
#: FIFO groups the fifo scenario publishes to.
FIFO_GROUPS = 5
#: The operations that settle and extend: where a lost answer means a duplicate at worst.
SETTLING = ('DeleteMessageBatch', 'SendMessageBatch', 'ChangeMessageVisibilityBatch')


class CreatesFile:
    """Unpickling this opens (creates) a file: proof that a body was unpickled."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self) -> Any:
        return (open, (self.path, 'w'))


class Chaos:
    """One chaos run: the endpoint, the proxy, the fleet, the tasks, the account."""

    def __init__(self, args: argparse.Namespace, scenario: str = 'kills'):
        self.args = args
        self.scenario = scenario
        self.actions = SCENARIOS[scenario]
        self.rng = random.Random(args.seed)
        self.workdir = tempfile.mkdtemp(prefix='kale-chaos-')
        self.log_path = os.path.join(self.workdir, 'tasks.log')
        self.prefix = 'c%s-' % uuid.uuid4().hex[:6]
        self.kinds: dict[str, str] = {}                 # task id -> kind
        self.hostile: dict[str, str] = {}               # hostile id -> kind
        self.hostile_bodies: dict[str, str] = {}        # body -> hostile id
        self.injected: collections.Counter[str] = collections.Counter()
        self.outage_sec = 0.0
        self.server: Any = None                        # SQSLocalProcess or Fauxqs
        self.proxy: Optional[TCPProxy] = None
        self.faults: Optional[FaultProxy] = None
        self.fleet: Optional[Fleet] = None
        self.publish_errors = 0
        #: Seconds from the end of the faults until every queue was drained.
        self.recovery_sec = 0.0
        self.records_url = ''
        self.cluster: Any = None
        self.sequence: dict[str, int] = {}              # FIFO group -> last seq published
        self.ordered_ids: dict[str, tuple[str, int]] = {}
        #: The workflows scenario's workflows (None in the others).
        self.flows = Workflows(self.rng, args.workflow_nodes) if scenario == 'workflows' \
            else None
        #: The workers' pool: --pool, else asyncio for workflows, serial for the rest.
        self.pool = args.pool or ('asyncio' if self.flows is not None else 'serial')
        self.last_kill = 0.0                            # epoch time of the last kill -9

    # --- setting up ----------------------------------------------------------------

    def start(self) -> None:
        if self.args.endpoint == 'fauxqs':
            from bench.servers import Fauxqs
            self.server = Fauxqs()
            self.endpoint = self.server.start()
        else:
            self.server = SQSLocalProcess(cwd=ROOT)
            self.endpoint = self.server.url
        self.faults = FaultProxy(self.endpoint, seed=self.args.seed).start()
        self.faults.latency_sec = self.args.latency_ms / 1000.0
        parsed = urlparse(self.faults.url)
        self.proxy = TCPProxy(parsed.hostname or '127.0.0.1', parsed.port or 0).start()
        self.records_url = self.make_records()
        base = {'KALE_SETTINGS_MODULE': 'bench.chaos_settings', 'KALE_CHAOS_PREFIX': self.prefix,
                'KALE_CHAOS_LOG': self.log_path, 'KALE_CHAOS_RECORDS': self.records_url}
        # The run publishes through the fault proxy (a lost answer to a
        # publish is one of the faults); hostile messages and the account
        # go straight to the endpoint.
        os.environ.update(base, KALE_CHAOS_ENDPOINT=self.faults.url)
        settings.reload()
        worker_env = dict(os.environ, KALE_CHAOS_ENDPOINT=self.proxy.url,
                          PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''))
        self.raw = boto3_client(self.endpoint, access_key='chaos', secret_key='chaos')
        self.publish_wave(10)           # creates the queues before any worker starts
        pools = POOLS if self.pool == 'mixed' else [self.pool]
        self.fleet = Fleet(self.args.workers, worker_env, ROOT, self.workdir, ','.join(QUEUES),
                           self.rng, pools)
        self.fleet.fill()

    def make_records(self) -> str:
        """The records database the run asked for ('' for none)."""
        if self.args.records == 'sqlite' or (
                (self.flows is not None or self.scenario == 'rate-limit')
                and self.args.records == 'off'):
            return 'sqlite:///%s' % os.path.join(self.workdir, 'records.db')
        if self.args.records == 'postgres':
            from tests.support.postgres import Cluster, find_binaries
            binaries = find_binaries()
            if binaries is None:
                raise SystemExit('chaos: --records postgres needs PostgreSQL (initdb, pg_ctl)')
            self.cluster = Cluster(binaries)
            return self.cluster.new_database()
        return ''

    def records_outage(self) -> None:
        """Stop PostgreSQL for 2-6 s (or lock the SQLite file as long)."""
        seconds = self.rng.uniform(2, 6)
        if self.cluster is not None:
            # A clean stop: the test cluster runs with synchronous_commit off, so an
            # immediate one would lose commits PostgreSQL had already confirmed.
            self.cluster.stop('fast')
            self.wait(seconds)
            self.cluster.start()
        elif self.records_url.startswith('sqlite:///'):
            import sqlite3
            conn = sqlite3.connect(self.records_url[len('sqlite:///'):], timeout=30,
                                   isolation_level=None)
            conn.execute('BEGIN EXCLUSIVE')
            self.wait(seconds)
            conn.execute('ROLLBACK')
            conn.close()
        else:
            return
        self.injected['records outage'] += 1
        self.outage_sec += seconds

    def stop(self) -> None:
        if self.fleet is not None:
            self.fleet.stop()
        if self.proxy is not None:
            self.proxy.stop()
        if self.faults is not None:
            self.faults.stop()
        if self.server is not None:
            self.server.stop()
        if self.cluster is not None:
            self.cluster.destroy()

    # --- tasks ----------------------------------------------------------------------

    def publish_wave(self, count: int) -> None:
        if self.flows is not None:
            self.flows.submit(count, self.kinds)
            return
        if self.scenario == 'fifo':
            self.publish_ordered(count)
            return
        if self.scenario == 'rate-limit':
            from bench import chaos_tasks
            keys = [uuid.uuid4().hex for _ in range(count)]
            self.publish(chaos_tasks.ChaosRateTask, [(('ok',), {'key': key}) for key in keys])
            self.kinds.update(dict.fromkeys(keys, 'ok'))
            return
        from bench import chaos_tasks
        classes = [chaos_tasks.ChaosHighTask, chaos_tasks.ChaosTask, chaos_tasks.ChaosLowTask]
        by_class: dict[Any, list[tuple[tuple, dict]]] = collections.defaultdict(list)
        for _ in range(count):
            roll = self.rng.random()
            if roll < 0.03:
                task_class, kind = chaos_tasks.ChaosFailingTask, 'fails'
            elif self.scenario == 'heartbeat' and roll > 0.9:
                task_class, kind = chaos_tasks.ChaosLongTask, 'long'
            else:
                task_class = self.rng.choice(classes)
                kind = 'flaky' if roll < 0.08 else 'slow' if roll < 0.11 else 'ok'
            by_class[(task_class, kind)].append(((kind,), {}))
        for (task_class, kind), calls in by_class.items():
            keyed = [(args, dict(kwargs, key=uuid.uuid4().hex)) for args, kwargs in calls]
            self.publish(task_class, keyed)
            for _, kwargs in keyed:
                self.kinds[kwargs['key']] = kind

    def publish_ordered(self, count: int) -> None:
        """The fifo scenario's tasks: ``count`` spread over FIFO_GROUPS groups,
        each group's in sequence; 10% raise on their first attempt."""
        from bench import chaos_tasks
        by_group: dict[str, list[tuple[tuple, dict]]] = collections.defaultdict(list)
        for _ in range(count):
            group = 'g%d' % self.rng.randrange(FIFO_GROUPS)
            seq = self.sequence[group] = self.sequence.get(group, 0) + 1
            kind = 'flaky' if self.rng.random() < 0.1 else 'ok'
            key = uuid.uuid4().hex
            by_group[group].append(((group, seq, kind), {'key': key}))
            self.kinds[key] = kind
            self.ordered_ids[key] = (group, seq)
        for group, calls in by_group.items():
            self.publish(chaos_tasks.ChaosOrderedTask, calls, group_id=group)

    def order_broken(self) -> list[str]:
        """FIFO groups whose tasks first completed out of their publish order."""
        seen: set[str] = set()
        by_group: dict[str, list[int]] = collections.defaultdict(list)
        for line in self.log_lines():
            if line[0] == 'done' and line[1] in self.ordered_ids and line[1] not in seen:
                seen.add(line[1])
                group, seq = self.ordered_ids[line[1]]
                by_group[group].append(seq)
        return ['%s: %s' % (group, seqs) for group, seqs in sorted(by_group.items())
                if seqs != sorted(seqs)]

    def rate_windows(self) -> list[tuple[float, int, int]]:
        """For each window of RATE_WINDOWS_SEC: the most rate-limited runs that
        started within one such window, and the most the limit allows."""
        starts = sorted(float(line[3]) for line in self.log_lines() if line[0] == 'rated')
        if not starts:
            return []
        from kale.flow.bucket import most_starts
        from kale.flow.spec import parse_rate
        rate = parse_rate(RATE_LIMIT)
        found = []
        for seconds in RATE_WINDOWS_SEC:
            most, first = 0, 0
            for last, at in enumerate(starts):
                while at - starts[first] >= seconds:
                    first += 1
                most = max(most, last - first + 1)
            found.append((seconds, most, int(most_starts(rate, seconds))))
        return found

    def over_rate(self) -> list[str]:
        """Windows in which more rate-limited runs started than the limit allows."""
        return ['%d starts in %g s (at most %d)' % (most, seconds, bound)
                for seconds, most, bound in self.rate_windows() if most > bound]

    def publish(self, task_class: Any, calls: list[tuple[tuple, dict]], **options: Any) -> None:
        """Publish, and publish again with the same task ids while it raises
        (a fault may have eaten the answer after SQS took the messages: the
        ids stay, so at worst a task is delivered twice, never as two tasks)."""
        from kale.exceptions import KaleError
        for attempt in range(60):
            try:
                task_class.publish_batch(None, calls, **options)
                return
            except KaleError:
                self.publish_errors += 1
                time.sleep(min(0.1 * 2 ** attempt, 2.0))
        raise RuntimeError('chaos: could not publish after 60 attempts')

    def publish_killer(self) -> None:
        from bench import chaos_tasks
        key = uuid.uuid4().hex
        self.publish(chaos_tasks.ChaosKillerTask, [((), {'key': key})])
        self.kinds[key] = 'killer'
        self.injected['killer task'] += 1

    def send_hostile(self) -> None:
        from kale import codec as kale_codec
        from kale import message as kale_message
        kind = HOSTILE_KINDS[len(self.hostile) % len(HOSTILE_KINDS)]     # each kind in turn
        hostile_id = '%s-%d' % (kind, len(self.hostile))
        queue = self.rng.choice(QUEUES[:3])             # standard queues: no group id
        here = self.prefix + queue
        ok = kale_message.Message(hostile_id, 'bench.chaos_tasks.ChaosTask', ('ok',))
        if kind == 'garbage':
            body = hostile_id + ''.join(self.rng.choice('abc{}[]:;=+/ \n') for _ in range(200))
        elif kind == 'wrong_signature':
            with settings.override(MESSAGE_SIGNING_KEY='not-the-chaos-key-0123456789abcdef'):
                body = kale_codec.encode(ok, here)
        elif kind == 'pickle':
            evil = pickle.dumps(CreatesFile(os.path.join(self.workdir, 'pwned-%s' % hostile_id)))
            body = 'kale2:s=p;c=-;d=b;k=00000000:%s:%s' % ('A' * 43,
                                                           base64.b64encode(evil).decode())
        elif kind == 'unknown_task':
            body = kale_codec.encode(kale_message.Message(
                hostile_id, 'bench.chaos_tasks.NoSuchTask', ()), here)
        elif kind == 'replayed':        # captured long ago: past the replay window
            body = kale_codec.encode(dataclasses.replace(ok, published_at=time.time() - 400 * DAY),
                                     here)
        elif kind == 'other_queue':     # captured on one queue, replayed into another
            other = next(q for q in QUEUES[:3] if q != queue)
            body = kale_codec.encode(ok, self.prefix + other)
        else:
            body = 'kale2:' + hostile_id + 'A' * 300000
        url = self.raw.get_queue_url(QueueName=self.prefix + queue)['QueueUrl']
        self.raw.send_message(QueueUrl=url, MessageBody=body)
        self.hostile[hostile_id] = kind
        self.hostile_bodies[body] = hostile_id     # known by body: attributes are not kept
        self.injected['hostile message'] += 1

    # --- faults ---------------------------------------------------------------------

    def log_lines(self) -> list[list[str]]:
        if not os.path.exists(self.log_path):
            return []
        with open(self.log_path) as f:
            return [line.split() for line in f if line.strip()]

    def killer_pids(self) -> set[int]:
        return {int(line[2]) for line in self.log_lines() if line[0] == 'killer'}

    def wait(self, seconds: float) -> None:
        """Sleep, keeping the fleet at strength meanwhile."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            assert self.fleet is not None
            self.fleet.reap(self.killer_pids)
            time.sleep(min(0.2, max(0.0, end - time.monotonic())))

    def inject(self) -> None:
        assert self.fleet is not None and self.proxy is not None and self.faults is not None
        action = self.rng.choice(self.actions)
        if action in ('throttle', 'server_error', 'slow', 'lost_answer', 'cut_answer',
                      'partial_batch'):
            seconds = self.rng.uniform(1, 4)
            self.faults.inject(action, seconds,
                               probability=0.3 if action in ('slow', 'lost_answer') else 0.5)
            self.injected['%s burst' % action] += 1
        elif action == 'lost_answer settling':
            self.faults.inject('lost_answer', self.rng.uniform(1, 4), probability=0.6,
                               operations=SETTLING)
            self.injected['lost_answer burst (settling)'] += 1
        elif action == 'records outage':
            self.records_outage()
        elif action == 'heartbeat fault':
            kind = self.rng.choice(['throttle', 'server_error', 'lost_answer'])
            self.faults.inject(kind, self.rng.uniform(2, 5), probability=0.7,
                               operations=['ChangeMessageVisibilityBatch',
                                           'ChangeMessageVisibility'])
            self.injected['%s burst (extensions)' % kind] += 1
        elif action == 'kill -9' and self.fleet.kill9():
            self.injected['kill -9'] += 1
            self.last_kill = time.time()
        elif action == 'SIGTERM' and self.fleet.sigterm():
            self.injected['SIGTERM'] += 1
        elif action == 'outage':
            seconds = self.rng.uniform(1, 5)
            self.proxy.stop()
            self.wait(seconds)
            self.proxy.start()
            self.injected['outage'] += 1
            self.outage_sec += seconds
        elif action == 'hostile':
            self.send_hostile()

    def run_faults(self) -> None:
        """Feed tasks in waves over the first 60% of the window; inject faults throughout."""
        duration = self.args.duration
        started = time.monotonic()
        waves = max(1, int(duration * 0.6 / 2))
        per_wave = max(1, (self.args.tasks - 10) // waves)
        published_waves = 0
        killer_at = started + duration * 0.1
        next_fault = started + self.rng.uniform(1, 3)
        while time.monotonic() - started < duration:
            now = time.monotonic()
            if published_waves < waves and now - started >= published_waves * 2:
                remaining = self.args.tasks - 10 - published_waves * per_wave
                self.publish_wave(per_wave if published_waves < waves - 1 else remaining)
                published_waves += 1
            if killer_at and now >= killer_at and 'kill -9' in self.actions:
                self.publish_killer()
                killer_at = 0
            if now >= next_fault:
                self.inject()
                next_fault = time.monotonic() + self.rng.uniform(1.5, 4)
            self.wait(0.2)

    # --- the account ----------------------------------------------------------------------

    def sqs_name(self, queue: str, dead: bool = False) -> str:
        """The SQS name of a chaos queue (or of its dead-letter queue)."""
        return self.prefix + ('dlq-' if dead else '') + queue + (
            '.fifo' if queue == 'chaos_ordered' else '')

    def counts(self, queue: str) -> int:
        url = self.raw.get_queue_url(QueueName=self.sqs_name(queue))['QueueUrl']
        attributes = self.raw.get_queue_attributes(QueueUrl=url, AttributeNames=[
            'ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible',
            'ApproximateNumberOfMessagesDelayed'])['Attributes']
        return sum(int(value) for value in attributes.values())

    def settle_down(self) -> bool:
        """Wait until every queue is empty and every task that should finish has."""
        deadline = time.monotonic() + self.args.drain_timeout
        while time.monotonic() < deadline:
            done = {line[1] for line in self.log_lines() if line[0] == 'done'}
            due = {task_id for task_id, kind in self.kinds.items() if kind in FINISHING}
            assert self.faults is not None
            self.faults.calm()                      # faults end: recovery is measured
            if due <= done and not any(self.counts(queue) for queue in QUEUES) and (
                    self.flows is None or self.flows.all_finished()):
                return True
            self.wait(1.0)
        return False

    def dead_letters(self) -> list[dict[str, Any]]:
        found = []
        for queue in QUEUES:
            url = self.raw.get_queue_url(QueueName=self.sqs_name(queue, dead=True))['QueueUrl']
            while True:
                batch = self.raw.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                                 MessageAttributeNames=['All'],
                                                 VisibilityTimeout=300).get('Messages', [])
                if not batch:
                    break
                found.extend(batch)
        return found

    def account(self, wall_sec: float, settled: bool) -> dict[str, Any]:
        assert self.fleet is not None
        lines = self.log_lines()
        done = [line[1] for line in lines if line[0] == 'done']
        completed = set(done)
        dead_tasks: dict[str, str] = {}
        dead_hostile: dict[str, str] = {}
        for message in self.dead_letters():
            attributes = {k: v.get('StringValue', '') for k, v in
                          message.get('MessageAttributes', {}).items()}
            reason = attributes.get('kale_dead_letter_reason', '').split(':')[0] or \
                'redrive (worker killed %s times)' % self.args_max_receive()
            if message['Body'] in self.hostile_bodies:
                dead_hostile[self.hostile_bodies[message['Body']]] = reason
                continue
            task_id = default_app().codec.open(message['Body'], '', check_age=False).task_id
            dead_tasks[task_id] = reason
        should_finish = {t for t, kind in self.kinds.items() if kind in FINISHING}
        should_die = {t for t, kind in self.kinds.items() if kind in ('fails', 'killer')}
        lost = sorted(t for t in self.kinds if t not in completed and t not in dead_tasks)
        # A completed task's extra copy (a send applied twice, a delete whose
        # answer was lost) that SQS's redrive policy moved after deliveries no
        # worker saw through (answers lost, workers killed) is a duplicate
        # that ended in the dead-letter queue instead of running again.
        redriven_copies = sorted(t for t in should_finish if t in completed
                                 and dead_tasks.get(t, '').startswith('redrive'))
        wrongly_dead = sorted(t for t in should_finish if t in dead_tasks
                              and t not in redriven_copies)
        unfinished = sorted(t for t in should_finish if t not in completed)
        killer = [t for t, kind in self.kinds.items() if kind == 'killer']
        records_wrong_ids = self.wrong_records(completed & should_finish,
                                               set(dead_tasks) & (should_die - set(killer)))
        records_wrong = len(records_wrong_ids)
        out_of_order = self.order_broken()
        over_rate = self.over_rate()
        pwned = [name for name in os.listdir(self.workdir) if name.startswith('pwned-')]
        unexpected = [exit for exit in self.fleet.exits if exit.cause == 'unexpected']
        return {
            'tasks published': len(self.kinds),
            'tasks that should complete': len(should_finish),
            'tasks completed at least once': len(completed & should_finish),
            'tasks lost': len(lost),
            'tasks that should have completed but did not': len(unfinished),
            'tasks dead-lettered that should have completed': len(wrongly_dead),
            'tasks meant for the dead-letter queue that are there': '%d / %d' % (
                len(should_die & set(dead_tasks)), len(should_die)),
            'killer task dead-lettered by the redrive policy': all(
                dead_tasks.get(t, '').startswith('redrive') for t in killer),
            'duplicate executions': '%d (%.1f%%)' % (len(done) - len(completed), 100.0 * (
                len(done) - len(completed)) / max(len(completed), 1)),
            'extra copies of completed tasks redriven to the dead-letter queue':
                len(redriven_copies),
            'dead-lettered tasks by reason': dict(collections.Counter(dead_tasks.values())),
            'hostile messages dead-lettered': '%d / %d' % (len(dead_hostile), len(self.hostile)),
            'hostile messages by reason': dict(collections.Counter(dead_hostile.values())),
            'files created by hostile pickles': len(pwned),
            'worker crashes other than injected': len(unexpected),
            'worker exits by cause': dict(collections.Counter(e.cause for e in self.fleet.exits)),
            'faults injected': dict(self.injected, **{'outage seconds': round(self.outage_sec, 1)}),
            'faults met by requests': self.faults.summary() if self.faults else {},
            'answers lost after the request was applied': dict(
                self.faults.applied_unanswered) if self.faults else {},
            'publishes retried with the same task ids': self.publish_errors,
            'duplicates allowed by at-least-once': self.duplicates_explained(),
            'records wrong': records_wrong if self.records_url else '-',
            'FIFO groups out of order': '%d / %d' % (len(out_of_order), len(self.sequence)),
            'most rate-limited starts in a window (bound)': ', '.join(
                '%gs: %d (%d)' % (seconds, most, bound)
                for seconds, most, bound in self.rate_windows()) or '-',
            'long tasks run again while running': '%d / %d (each after its extensions failed)'
            % (len(self.overlapping_runs()), sum(1 for k in self.kinds.values() if k == 'long')),
            'queues drained at the end': settled,
            'drained within (s) of the faults ending': round(self.recovery_sec, 1),
            'wall time (s)': round(wall_sec, 1),
            '_failures': {
                'lost': lost, 'unfinished': unfinished, 'wrongly_dead': wrongly_dead,
                'hostile_missing': sorted(set(self.hostile) - set(dead_hostile)),
                'unexpected_exits': [(e.pid, e.code, e.log_path) for e in unexpected],
                'pwned': pwned, 'killer_not_redriven': [
                    t for t in killer if not dead_tasks.get(t, '').startswith('redrive')],
                'not_settled': [] if settled else ['queues not drained'],
                'records_wrong': records_wrong_ids,
                'fifo_order': out_of_order,
                'over_rate': over_rate,
            },
        }

    def wrong_records(self, completed: set[str], dead: set[str]) -> list[str]:
        """Tasks whose record does not say what happened: every completed
        task must be ``succeeded`` and every task Kale dead-lettered ``failed``
        (the killer, moved by SQS while its worker died, is left out: no
        worker lived to record its end)."""
        if not self.records_url:
            return []
        from kale import records
        from kale.app import default_app
        app = default_app().replace(RECORDS_URL=self.records_url)
        wrong = []
        deadline = time.monotonic() + 30          # the workers' writers catch up
        while True:
            wrong = []
            for task_id in sorted(completed | dead):
                record = records.get(task_id, app=app)
                want = 'succeeded' if task_id in completed else 'failed'
                if record is None:
                    wrong.append('%s: no record, not %s' % (task_id, want))
                elif record.status != want:
                    wrong.append('%s: %s, not %s (published %.3f, started %s, updated %.3f, by %s)'
                                 % (task_id, record.status, want, record.published_at,
                                    record.started_at, record.updated_at, record.worker))
            if not wrong or time.monotonic() > deadline:
                return wrong
            time.sleep(1.0)

    def overlapping_runs(self) -> list[str]:
        """Long tasks that started again while a run of theirs was still going
        (one that went on to complete): a heartbeat that failed to keep the
        message invisible."""
        runs: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
        started: dict[tuple[str, str], float] = {}
        for line in self.log_lines():
            if line[0] == 'long':
                started[(line[1], line[2])] = float(line[3])
            elif line[0] == 'done' and (line[1], line[2]) in started:
                runs[line[1]].append((started.pop((line[1], line[2])), float(line[3])))
        found = []
        for task_id, spans in runs.items():
            begins = sorted(begin for begin, _ in spans) + sorted(
                begin for (tid, _), begin in started.items() if tid == task_id)
            for begin, end in spans:
                if any(begin < other < end for other in begins if other != begin):
                    found.append(task_id)
                    break
        return sorted(found)

    def duplicates_explained(self) -> str:
        """What may have run a task twice: a worker killed after a run, an
        answer to a delete or a send lost after it was applied, a redelivery
        after an extension's answer was lost."""
        kills = self.injected.get('kill -9', 0) + self.injected.get('SIGTERM', 0)
        lost = self.faults.applied_unanswered if self.faults else {}
        return 'kills %d, settling answers lost %d, publish answers lost %d' % (
            kills, sum(lost.get(op, 0) for op in ('DeleteMessageBatch',
                                                  'ChangeMessageVisibilityBatch')),
            lost.get('SendMessageBatch', 0))

    def args_max_receive(self) -> int:
        return int(settings.MAX_RECEIVE_COUNT)


def run_scenario(args: argparse.Namespace, scenario: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """One scenario, start to account: (report, failures)."""
    chaos = Chaos(args, scenario)
    started = time.monotonic()
    try:
        chaos.start()
        chaos.run_faults()
        faults_ended, faults_ended_at = time.monotonic(), time.time()
        settled = chaos.settle_down()
        chaos.recovery_sec = time.monotonic() - faults_ended
        assert chaos.fleet is not None
        chaos.fleet.stop()
        chaos.fleet.reap(chaos.killer_pids, replace=False)
        report = chaos.account(time.monotonic() - started, settled)
        if chaos.flows is not None:
            flows = chaos.flows.account(chaos.log_lines(), chaos.last_kill, faults_ended_at,
                                        chaos.workdir)
            report['_failures'].update(flows.pop('_failures'))
            report.update(flows)
    finally:
        chaos.stop()
    failures = {name: found for name, found in report.pop('_failures').items() if found}
    print('chaos %s: %d tasks, %d workers (pool %s), %g s of faults, seed %d%s (logs in %s)'
          % (scenario, args.tasks, args.workers, chaos.pool, args.duration, args.seed,
             ', +%g ms a request' % args.latency_ms if args.latency_ms else '', chaos.workdir))
    width = max(len(name) for name in report)
    for name, value in report.items():
        print('  %s  %s' % (name.ljust(width), value))
    print('  result: %s' % ('PASS' if not failures else 'FAIL %s' % json.dumps(failures)))
    return report, failures


SUMMARY_COLUMNS = ('scenario', 'faults injected', 'published', 'ran', 'lost', 'duplicates',
                   'wrongly dead-lettered', 'records wrong', 'result')


def summary_row(scenario: str, report: dict[str, Any], failures: dict[str, Any]) -> list[str]:
    faults = sum(v for k, v in report['faults injected'].items() if k != 'outage seconds')
    return [scenario, str(faults), str(report['tasks published']),
            str(report['tasks completed at least once']), str(report['tasks lost']),
            report['duplicate executions'].split()[0],
            str(report['tasks dead-lettered that should have completed']),
            str(report['records wrong']),
            'PASS' if not failures else 'FAIL']


WORKFLOW_COLUMNS = ('scenario', 'workflows', 'nodes', 'republished', 'run twice (settled)',
                    'joins twice', 'recovery (s)', 'result')


def workflow_row(scenario: str, report: dict[str, Any], failures: dict[str, Any]) -> list[str]:
    """The workflows scenario's own figures, for the table after the summary."""
    return [scenario, report['workflows finished'].replace(' ', ''),
            str(report['workflow nodes']), str(report['workflow nodes republished by a sweep']),
            '%d (%d)' % (report['workflow nodes run more than once'],
                         report['workflow nodes run again after a run that settled']),
            report['workflow joins run more than once'].split()[0],
            '%s%.1f' % ('> ' if 'workflows_unfinished' in failures else '',
                        report["recovery (s): faults' end to last workflow finished"]),
            'PASS' if not failures else 'FAIL']


def table(columns: Sequence[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(row[i])) for row in rows + [list(columns)]) for i in range(len(columns))]
    print()
    for row in [list(columns)] + rows:
        print('  '.join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)))


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog='python -m bench.chaos', description=__doc__.split('\n')[0])
    parser.add_argument('--scenarios', default='',
                        help='comma-separated, of %s (default: all of them in turn; '
                             'records-outage only with --records)' % ', '.join(SCENARIOS))
    parser.add_argument('--tasks', type=int, default=600, help='tasks to publish (default 600)')
    parser.add_argument('--workers', type=int, default=3, help='worker processes (default 3)')
    parser.add_argument('--duration', type=float, default=90,
                        help='seconds of faults per scenario (default 90)')
    parser.add_argument('--drain-timeout', type=float, default=120,
                        help='seconds to wait for the workers to finish afterwards (default 120)')
    parser.add_argument('--seed', type=int, default=7)
    parser.add_argument('--endpoint', choices=('moto', 'fauxqs'), default='moto',
                        help='the SQS endpoint the run starts: the embedded moto (default) or '
                             'fauxqs (from npm; see bench/README.md)')
    parser.add_argument('--pool', choices=POOLS + ['mixed'], default=None,
                        help="the workers' pool (kale worker --pool); mixed: each worker in "
                             'turn takes the next of serial, threads and asyncio (default '
                             'asyncio for workflows, serial for the other scenarios)')
    parser.add_argument('--records', choices=('off', 'sqlite', 'postgres'), default='off',
                        help='task records on, in a SQLite file or a PostgreSQL server of the '
                             "run's own, checked against what happened (default off; the "
                             'workflows scenario keeps them in SQLite when off)')
    parser.add_argument('--workflow-nodes', type=int, default=50,
                        help="nodes in each of the workflows scenario's workflows, about "
                             '(default 50)')
    parser.add_argument('--latency-ms', type=float, default=0,
                        help='milliseconds every SQS request waits in the fault proxy, the '
                             'whole run long: a slow or far endpoint (default 0)')
    parser.add_argument('--json', metavar='FILE', help='also write the accounts as JSON')
    args = parser.parse_args(argv)
    scenarios = [name.strip() for name in args.scenarios.split(',') if name.strip()] or [
        name for name in SCENARIOS if (name != 'records-outage' or args.records != 'off')
        and (name != 'fifo' or args.endpoint != 'moto')]
    unknown = [name for name in scenarios if name not in SCENARIOS]
    if unknown or not scenarios:
        parser.error('unknown scenario %r: use %s' % (', '.join(unknown), ', '.join(SCENARIOS)))
    if 'fifo' in scenarios and args.endpoint == 'moto':
        parser.error('the fifo scenario needs --endpoint fauxqs: moto hands out a later message '
                     "of a FIFO group first when several of the group's messages time out together")
    if args.workflow_nodes < 5:
        parser.error('--workflow-nodes must be 5 or more, got %d' % args.workflow_nodes)
    if args.latency_ms < 0:
        parser.error('--latency-ms must be 0 or more, got %g' % args.latency_ms)
    results: dict[str, Any] = {}
    rows, flow_rows = [], []
    for scenario in scenarios:
        report, failures = run_scenario(args, scenario)
        results[scenario] = dict(report, failures=failures)
        rows.append(summary_row(scenario, report, failures))
        if 'workflow nodes' in report:
            flow_rows.append(workflow_row(scenario, report, failures))
    table(SUMMARY_COLUMNS, rows)
    if flow_rows:
        table(WORKFLOW_COLUMNS, flow_rows)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(results, f, indent=2)
    return 1 if any(result['failures'] for result in results.values()) else 0


if __name__ == '__main__':
    sys.exit(main())
