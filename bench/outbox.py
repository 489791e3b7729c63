"""The outbox (issue 28): the `outbox-relay`, `outbox-lag`, `outbox-lag-poll`
and `outbox-publish` scenarios, run only when named in --scenarios.

- ``outbox-relay``: N no-op tasks are committed into ``kale_outbox`` (with
  ``outbox.publish_batch``, 100 a transaction, untimed but reported), then a
  relay process drains them to SQS: a :class:`kale.outbox.relay.Relay` built
  as ``kale relay --burst`` builds it, its database connection and queue URLs
  ready, timed from ``run(until_empty=True)`` to its return. Beside it, the
  same N tasks published with ``Task.publish_batch`` in calls of the relay's
  batch (100), timed from the first call to the last return. Target: the
  relay at least 0.8x publish_batch's tasks/s.
- ``outbox-lag``: a relay (the real ``kale relay`` command, in a process of
  its own) on PostgreSQL with LISTEN/NOTIFY, while publishers commit one
  ``outbox.publish`` per transaction at ``--outbox-rate`` a second for
  ``--outbox-seconds``. A task's lag is the ``SentTimestamp`` SQS gives its
  message (milliseconds) minus the moment its transaction's commit
  returned. Targets: p50 <= 20 ms, p99 <= 100 ms.
- ``outbox-lag-poll``: the same with the notify trigger dropped, so that
  the relay only polls every ``OUTBOX_POLL_SEC`` (1 s): what LISTEN/NOTIFY
  buys. On SQLite (which has no LISTEN) this is the only lag scenario.
- ``outbox-publish``: what ``outbox.publish`` costs the caller's transaction:
  a transaction inserting one application row, timed beside the same
  transaction with one ``outbox.publish`` (interleaved, medians), and with
  an ``outbox.publish_batch`` of 100; the baselines are one ``Task.publish``
  call and a ``publish_batch`` of 100 straight to SQS. Target: <= 0.5 ms a
  task. No relay runs meanwhile.

The application database is a throwaway PostgreSQL cluster the benchmark
starts (initdb into a temporary folder, a free port of 127.0.0.1, a fresh
database a run) and stops, or ``--outbox-url`` (a database of its own: its
``kale_outbox`` must be empty; ``sqlite`` alone means a fresh SQLite file a
run). Its relays write a line per round (start, claim, send, end and the
claimed task ids) that the benchmark turns into where a task's lag goes,
printed on stderr; ``--outbox-profile`` also runs the ``outbox-relay``
relay under cProfile.

    python -m bench.outbox relay URL [--burst REPORT] [--rounds FILE] [--profile FILE]
"""
from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import pwd
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Callable, Iterator, Optional, Sequence

from bench import tasks
from bench.environment import QUEUE_NAMES, ROOT, Environment, Run
from bench.idle import percentile
from bench.raw import boto3_client
from bench.scenarios import Figures, alternating
from bench.servers import BenchError, free_port

SCENARIOS = ('outbox-relay', 'outbox-lag', 'outbox-lag-poll', 'outbox-publish')
#: Tasks a run of outbox-relay commits and relays, and its publish_batch calls' size
#: (kale.outbox.relay.BATCH, the rows a relay round claims).
DEFAULT_TASKS = 5000
BATCH = 100
#: The lag scenarios: commits a second, seconds, and publisher threads sharing the schedule.
DEFAULT_RATE = 200.0
DEFAULT_SECONDS = 10.0
PUBLISHERS = 4
#: outbox-publish: transactions timed of each kind (publish_batch: a tenth as many).
DEFAULT_TRANSACTIONS = 1000
WARM_UP = 50
#: How long a relay may take to drain what it was given.
DRAIN_TIMEOUT_SEC = 300.0
#: The throwaway cluster's user when the benchmark runs as root (initdb refuses root).
PG_OWNER = 'postgres'
PG_SEARCH = ('/usr/lib/postgresql/*/bin', '/usr/local/pgsql/bin', '/usr/local/bin')

TARGET_RELAY = 0.8
TARGET_P50_MS = 20.0
TARGET_P99_MS = 100.0
TARGET_PUBLISH_MS = 0.5


# --- figures ------------------------------------------------------------------------------

RELAY = 'outbox relay: committed tasks to SQS (tasks/s; baseline: publish_batch of 100)'
RELAY_CPU = 'outbox relay: CPU per task (µs; baseline: publish_batch of 100)'
RELAY_REQUESTS = 'outbox relay: requests per task (baseline: publish_batch of 100)'
FILL = 'outbox.publish_batch of 100 a transaction (tasks/s; baseline: publish_batch of 100)'
TRANSACTION = ('outbox.publish: a transaction inserting a row and publishing one task '
               '(ms; baseline: without the publish)')
PUBLISH_COST = 'outbox.publish: its cost to the transaction (ms; baseline: one Task.publish)'
BATCH_COST = ('outbox.publish_batch of 100: its cost to the transaction per task '
              '(ms; baseline: publish_batch of 100, per task)')


def lag_figure_names(poll: bool, rate: float) -> dict[str, str]:
    how = 'poll only' if poll else 'LISTEN/NOTIFY'
    return {'p50': 'outbox lag, %s, %g commits/s: commit to SQS p50 (ms)' % (how, rate),
            'p99': 'outbox lag, %s, %g commits/s: commit to SQS p99 (ms)' % (how, rate),
            'rate': 'outbox lag, %s: commits/s reached' % how,
            'cpu': 'outbox lag, %s: relay CPU (%% of a core)' % how}


def targets(rate: float) -> dict[str, tuple[str, Callable[[float, Optional[float]], bool]]]:
    """Entries for bench.report.TARGETS: issue 28's."""
    lag = lag_figure_names(False, rate)
    return {
        RELAY: ('>= %g x publish_batch' % TARGET_RELAY,
                lambda k, b: b is not None and k >= TARGET_RELAY * b),
        lag['p50']: ('<= %g' % TARGET_P50_MS, lambda k, b: k <= TARGET_P50_MS),
        lag['p99']: ('<= %g' % TARGET_P99_MS, lambda k, b: k <= TARGET_P99_MS),
        PUBLISH_COST: ('<= %g' % TARGET_PUBLISH_MS, lambda k, b: k <= TARGET_PUBLISH_MS),
    }


# --- the database: given, or a throwaway PostgreSQL cluster ------------------------------

def pg_binaries() -> str:
    """The folder of initdb and pg_ctl; BenchError when there is none."""
    found = shutil.which('initdb')
    if found and shutil.which('pg_ctl'):
        return os.path.dirname(found)
    for pattern in PG_SEARCH:
        for folder in sorted(glob.glob(pattern), reverse=True):
            if os.path.exists(os.path.join(folder, 'initdb')) and \
                    os.path.exists(os.path.join(folder, 'pg_ctl')):
                return folder
    raise BenchError('the outbox scenarios need PostgreSQL (initdb and pg_ctl, e.g. apt-get '
                     'install postgresql) to start a throwaway cluster, or --outbox-url URL')


class Cluster:
    """A PostgreSQL server of the benchmark's own: initdb into a temporary
    folder, pg_ctl start on a free port of 127.0.0.1 (and a socket in that
    folder), pg_ctl stop and the folder removed at the end. As root it runs
    as the user ``postgres``. PostgreSQL's defaults otherwise (fsync on),
    but ``synchronous_commit`` as given."""

    def __init__(self, synchronous_commit: str = 'on', options: Sequence[str] = ()):
        self.binaries = pg_binaries()
        self.synchronous_commit = synchronous_commit
        #: More server settings, each ``name=value`` (``-c`` of postgres).
        self.options = list(options)
        self.owner: Optional[str] = None
        if os.geteuid() == 0:
            try:
                pwd.getpwnam(PG_OWNER)
            except KeyError:
                raise BenchError('as root the throwaway PostgreSQL cluster runs as the user %s, '
                                 'which does not exist: create it, or give --outbox-url URL'
                                 % PG_OWNER) from None
            self.owner = PG_OWNER
        self.root = ''
        self.port = 0
        self.started = False

    def _run(self, tool: str, *args: str) -> None:
        command = [os.path.join(self.binaries, tool), *args]
        if self.owner:
            command = ['runuser', '-u', self.owner, '--', *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120,
                                stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            raise BenchError('PostgreSQL: %s failed: %s' % (
                tool, ' '.join((result.stdout + result.stderr).split())[-300:]))

    def start(self) -> 'Cluster':
        self.root = tempfile.mkdtemp(prefix='kale-bench-pg-')
        if self.owner:
            os.chmod(self.root, 0o755)
            shutil.chown(self.root, self.owner)
        data = os.path.join(self.root, 'data')
        self._run('initdb', '-D', data, '-U', 'kale', '-A', 'trust', '-E', 'UTF8', '--no-sync',
                  '--no-instructions')
        self.port = free_port()
        self._run('pg_ctl', '-D', data, '-l', os.path.join(self.root, 'log'), '-w', '-t', '60',
                  '-o', '-p %d -k %s -c listen_addresses=127.0.0.1 -c synchronous_commit=%s%s'
                  % (self.port, self.root, self.synchronous_commit,
                     ''.join(' -c %s' % option for option in self.options)), 'start')
        self.started = True
        return self

    def url(self, database: str) -> str:
        return 'postgresql://kale@127.0.0.1:%d/%s' % (self.port, database)

    def admin(self, statement: str) -> None:
        import psycopg
        with psycopg.connect('host=127.0.0.1 port=%d user=kale dbname=postgres' % self.port,
                             autocommit=True) as conn:
            conn.execute(statement)

    def stop(self) -> None:
        if self.started:
            self.started = False
            try:
                self._run('pg_ctl', '-D', os.path.join(self.root, 'data'), '-m', 'fast', '-w',
                          '-t', '30', 'stop')
            except (BenchError, subprocess.TimeoutExpired):
                self._run('pg_ctl', '-D', os.path.join(self.root, 'data'), '-m', 'immediate',
                          'stop')
        if self.root:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = ''


class Databases:
    """Where each run's outbox lives: ``--outbox-url`` as given (``sqlite``:
    a fresh SQLite file a run), else a fresh database a run on a throwaway
    PostgreSQL cluster started on first use and stopped by :meth:`stop`."""

    def __init__(self, given: str = '', synchronous_commit: str = 'on'):
        self.given = given
        self.synchronous_commit = synchronous_commit
        self.cluster: Optional[Cluster] = None

    def describe(self) -> str:
        if self.given == 'sqlite':
            return 'a fresh SQLite file a run'
        if self.given:
            from kale.store.sql.records import safe_url
            return safe_url(self.given)
        return 'PostgreSQL (a throwaway cluster, synchronous_commit=%s)' % self.synchronous_commit

    @contextlib.contextmanager
    def database(self, env: Environment) -> Iterator[str]:
        """A database URL for one run."""
        if self.given == 'sqlite':
            yield 'sqlite:///%s' % os.path.join(env.workdir, 'outbox-%s.db' % uuid.uuid4().hex[:8])
            return
        if self.given:
            yield self.given
            return
        if self.cluster is None:
            self.cluster = Cluster(self.synchronous_commit)
        if not self.cluster.started:
            self.cluster.start()
        name = 'bench_%s' % uuid.uuid4().hex[:10]
        self.cluster.admin('CREATE DATABASE %s' % name)
        try:
            yield self.cluster.url(name)
        finally:
            self.cluster.admin('DROP DATABASE IF EXISTS %s WITH (FORCE)' % name)

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()


def open_outbox(url: str) -> Any:
    """The run's engine, its outbox tables made; BenchError when its outbox holds rows."""
    from kale import outbox
    engine = outbox.open_database(url, '--outbox-url')
    outbox.init(engine)
    if pending(engine):
        engine.dispose()
        raise BenchError('kale_outbox of %s holds rows: give the benchmark a database of its own'
                         % engine.url.render_as_string(hide_password=True))
    return engine


def pending(engine: Any) -> int:
    from sqlalchemy import func, select

    from kale.store.sql.outbox_schema import outbox as outbox_table
    with engine.begin() as conn:
        return int(conn.execute(select(func.count()).select_from(outbox_table)).scalar() or 0)


def wait_empty(engine: Any, what: str, timeout: float = DRAIN_TIMEOUT_SEC) -> None:
    deadline = time.monotonic() + timeout
    while pending(engine):
        if time.monotonic() > deadline:
            raise BenchError('%s: the relay did not empty kale_outbox within %gs (%d rows left)'
                             % (what, timeout, pending(engine)))
        time.sleep(0.02)


# --- in the relay process -----------------------------------------------------------------

class RoundLog:
    """Times the rounds of every Relay of this process: for each round that
    claimed rows, when it started, claimed, had sent and ended, and the task
    ids claimed; how many rounds found nothing, and their time. A relay runs
    several rounds at once, each on a thread of its own."""

    def __init__(self) -> None:
        self.rounds: list[dict[str, Any]] = []
        self.empty = 0
        self.empty_seconds = 0.0
        self._local = threading.local()
        self._lock = threading.Lock()

    def install(self) -> None:
        from kale.outbox.relay import Relay
        log = self
        send_round, checked, send = Relay.send_round, Relay._checked, Relay._send

        def timed_round(relay: Any) -> int:
            entry: dict[str, Any] = {'start': time.time()}
            log._local.current = entry
            try:
                return send_round(relay)
            finally:
                entry['end'] = time.time()
                log._local.current = None
                with log._lock:
                    if entry.get('tasks'):
                        log.rounds.append(entry)
                    else:
                        log.empty += 1
                        log.empty_seconds += entry['end'] - entry['start']

        def timed_checked(relay: Any, rows: list[Any]) -> Any:
            current = getattr(log._local, 'current', None)   # checked as soon as claimed
            if current is not None:
                current['claimed'] = time.time()
                current['tasks'] = [row.task_id for row in rows]
            return checked(relay, rows)

        def timed_send(relay: Any, rows: list[Any]) -> list[dict[str, Any]]:
            try:
                return send(relay, rows)
            finally:
                current = getattr(log._local, 'current', None)
                if current is not None:
                    current['sent'] = time.time()

        for name, timed in (('send_round', timed_round), ('_checked', timed_checked),
                            ('_send', timed_send)):
            setattr(Relay, name, timed)

    def dump(self, path: str) -> None:
        with open(path, 'w') as f:
            json.dump({'rounds': self.rounds, 'empty': self.empty,
                       'empty_seconds': self.empty_seconds}, f)


def relay_burst(url: str, report_path: str, log: RoundLog, profile_path: str = '') -> None:
    """A Relay built as ``kale relay --burst`` builds it, its connection and
    queue URLs ready, drains the outbox (``run(until_empty=True)``): timed
    from the call to the end of its last round that sent rows (the return
    comes later: the round that finds nothing, and the LISTEN thread's end)."""
    from bench.counter import RequestCounter
    from kale.app import default_app
    from kale.conf import settings
    from kale.outbox.relay import Relay, with_records
    from kale.store.sql.outbox_schema import open_database
    relay = Relay(open_database(url, '--url'), default_app().broker,
                  poll_sec=float(settings.OUTBOX_POLL_SEC),
                  consumed_ttl_sec=settings.CONSUMED_TTL_SEC,
                  config=settings.config, **with_records(default_app()))
    relay.store.init()                                  # and a connection in the pool
    for name in QUEUE_NAMES:
        relay.broker.declare(relay.broker.queues[name])
    transport: Any = relay.broker.transport
    counter = RequestCounter().attach(transport.client)
    profiler = None
    if profile_path:
        import cProfile
        profiler = cProfile.Profile()
    started, cpu = time.time(), time.process_time()
    if profiler is not None:
        profiler.enable()
    relay.run(threading.Event(), until_empty=True)
    if profiler is not None:
        profiler.disable()
    returned, cpu = time.time(), time.process_time() - cpu
    if profiler is not None:
        profiler.dump_stats(profile_path)
    last = max((entry['end'] for entry in log.rounds), default=returned)
    with open(report_path, 'w') as f:
        json.dump({'seconds': last - started, 'returned': returned - started, 'cpu': cpu,
                   'sent': relay.counts.sent, 'requests': counter.total}, f)


def relay_main(argv: Sequence[str]) -> int:
    """``relay URL``: ``kale relay --url URL`` in this process (until SIGTERM),
    or with ``--burst REPORT`` :func:`relay_burst`; ``--rounds FILE`` writes
    the :class:`RoundLog` there at the end."""
    parser = argparse.ArgumentParser(prog='python -m bench.outbox relay')
    parser.add_argument('url')
    parser.add_argument('--burst', metavar='REPORT')
    parser.add_argument('--rounds', metavar='FILE')
    parser.add_argument('--profile', metavar='FILE')
    args = parser.parse_args(argv)
    log = RoundLog()
    log.install()
    try:
        if args.burst:
            relay_burst(args.url, args.burst, log, args.profile or '')
            return 0
        from kale import cli
        return cli.main(['relay', '--url', args.url, '--log-level', 'WARNING'])
    finally:
        if args.rounds:
            log.dump(args.rounds)


# --- in the benchmark ---------------------------------------------------------------------

def relay_command(url: str, *options: str) -> list[str]:
    return [sys.executable, '-m', 'bench.outbox', 'relay', url, *options]


def read_rounds(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {'rounds': [], 'empty': 0, 'empty_seconds': 0.0}


def ms(seconds: float) -> float:
    return 1000.0 * seconds


def round_summary(rounds: dict[str, Any]) -> str:
    """Medians of a relay's rounds' phases, for stderr."""
    entries = rounds['rounds']
    if not entries:
        return 'no rounds'

    def phase(start: str, end: str) -> float:
        return statistics.median(ms(e[end] - e[start]) for e in entries)
    rows = sum(len(e['tasks']) for e in entries)
    return ('%d rounds with rows (%.1f rows each), median ms: claim %.2f, send %.2f, '
            'delete and commit %.2f; %d empty rounds (%.0f ms in all)'
            % (len(entries), rows / len(entries), phase('start', 'claimed'),
               phase('claimed', 'sent'), phase('sent', 'end'), rounds['empty'],
               ms(rounds['empty_seconds'])))


# --- outbox-relay -------------------------------------------------------------------------

def fill(engine: Any, n: int) -> float:
    """Commit n no-op tasks into the outbox, 100 a transaction; seconds taken."""
    from kale import outbox
    started = time.perf_counter()
    for first in range(0, n, BATCH):
        with engine.begin() as conn:
            outbox.publish_batch(conn, tasks.NoopTask, None,
                                 [((i,), {}) for i in range(first, min(n, first + BATCH))])
    return time.perf_counter() - started


def queued(run: Run, queue: str = 'bench_default') -> int:
    """Messages visible on the run's queue."""
    return run.broker.counts(run.broker.queues[queue]).visible


def relay_side(env: Environment, databases: Databases, n: int, profile: bool) -> dict[str, Any]:
    run = env.new_run()
    try:
        with databases.database(env) as url:
            engine = open_outbox(url)
            try:
                fill_seconds = fill(engine, n)
                report_path = env.report_path()
                rounds_path = report_path + '.rounds'
                options = ['--burst', report_path, '--rounds', rounds_path]
                profile_path = report_path + '.prof'
                if profile:
                    options += ['--profile', profile_path]
                result = subprocess.run(relay_command(url, *options), cwd=ROOT,
                                        env=env.worker_env(), capture_output=True, text=True,
                                        timeout=DRAIN_TIMEOUT_SEC)
                if result.returncode != 0:
                    raise BenchError('outbox-relay: the relay failed: %s'
                                     % ' '.join(result.stderr.split())[-400:])
                left = pending(engine)
            finally:
                engine.dispose()
        with open(report_path) as f:
            report = json.load(f)
        arrived = queued(run)
        if report['sent'] != n or left or arrived != n:
            raise BenchError('outbox-relay: %d tasks committed, the relay sent %d, %d left in '
                             'the outbox, %d on the queue' % (n, report['sent'], left, arrived))
        print('bench: outbox-relay: %s; run() returned %.0f ms after the last round'
              % (round_summary(read_rounds(rounds_path)),
                 ms(report['returned'] - report['seconds'])), file=sys.stderr)
        if profile:
            print_profile(profile_path)
        report['fill'] = fill_seconds
        return report
    finally:
        run.close()


def print_profile(path: str, lines: int = 25) -> None:
    import io
    import pstats
    out = io.StringIO()
    pstats.Stats(path, stream=out).sort_stats('tottime').print_stats(lines)
    print('bench: outbox-relay: the relay\'s profile (own time):\n%s' % out.getvalue(),
          file=sys.stderr)


def direct_side(env: Environment, n: int) -> dict[str, Any]:
    """The same n tasks with Task.publish_batch, 100 a call."""
    run = env.new_run()
    try:
        calls: list[Any] = [((i,), {}) for i in range(n)]
        before = run.counter.total
        started, cpu = time.perf_counter(), time.process_time()
        for first in range(0, n, BATCH):
            tasks.NoopTask.publish_batch(None, calls[first:first + BATCH])
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        requests = run.counter.total - before
        if queued(run) != n:
            raise BenchError('outbox-relay: publish_batch sent %d tasks, %d on the queue'
                             % (n, queued(run)))
        return {'seconds': seconds, 'cpu': cpu, 'requests': requests}
    finally:
        run.close()


_relay_first = [False]


def relay_figures(env: Environment, databases: Databases, n: int, profile: bool = False
                  ) -> Figures:
    """The relay's drain beside publish_batch, in alternating order from run to run."""
    relay, direct = alternating(_relay_first, lambda: relay_side(env, databases, n, profile),
                                lambda: direct_side(env, n))
    return {RELAY: (n / relay['seconds'], n / direct['seconds']),
            RELAY_CPU: (1e6 * relay['cpu'] / n, 1e6 * direct['cpu'] / n),
            RELAY_REQUESTS: (relay['requests'] / n, direct['requests'] / n),
            FILL: (n / relay['fill'], n / direct['seconds'])}


# --- outbox-lag and outbox-lag-poll -------------------------------------------------------

@contextlib.contextmanager
def notify_trigger(engine: Any, on: bool) -> Iterator[None]:
    """PostgreSQL: the notify trigger dropped for the block when not ``on``
    (the relay then only polls), and made again after it."""
    if on or engine.dialect.name != 'postgresql':
        yield
        return
    from kale.store.sql.outbox_schema import NOTIFY_TRIGGER
    with engine.begin() as conn:
        conn.exec_driver_sql('DROP TRIGGER IF EXISTS kale_outbox_notify ON kale_outbox')
    try:
        yield
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql('DROP TRIGGER IF EXISTS kale_outbox_notify ON kale_outbox')
            conn.exec_driver_sql(NOTIFY_TRIGGER)


def publish_one(engine: Any, number: int) -> tuple[str, float]:
    """One transaction publishing one task; its id and when the commit returned."""
    from kale import outbox
    with engine.begin() as conn:
        task_id = outbox.publish(conn, tasks.NoopTask, None, number)
    return task_id, time.time()


def publish_at(engine: Any, rate: float, seconds: float) -> tuple[dict[str, float], float]:
    """Commit ``rate * seconds`` tasks, one a transaction, the i-th due at
    ``start + i / rate`` (:data:`PUBLISHERS` threads share the schedule; one
    that falls behind publishes at once); task id -> commit time, and the rate reached."""
    total = max(1, int(rate * seconds))
    committed: dict[str, float] = {}
    failures: list[BaseException] = []
    start = time.monotonic() + 0.05

    def publisher(first: int) -> None:
        try:
            for number in range(first, total, PUBLISHERS):
                delay = start + number / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                task_id, at = publish_one(engine, number)
                committed[task_id] = at
        except BaseException as exc:        # reported by the benchmark's thread
            failures.append(exc)

    threads = [threading.Thread(target=publisher, args=(k,), name='bench-outbox-%d' % k)
               for k in range(min(PUBLISHERS, total))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise BenchError('outbox-lag: a publisher failed: %s' % failures[0])
    return committed, total / max(time.monotonic() - start, 1e-9)


def sent_timestamps(env: Environment, run: Run, expected: set[str]) -> dict[str, float]:
    """task id -> SentTimestamp (s) of the expected tasks' messages, received
    straight from the endpoint (not through the latency proxy)."""
    from kale import codec
    client = boto3_client(env.upstream, access_key='bench', secret_key='bench')
    name = run.broker.sqs_name(run.broker.queues['bench_default'])
    url = client.get_queue_url(QueueName=name)['QueueUrl']
    found: dict[str, float] = {}
    empty = 0
    while not expected <= found.keys() and empty < 3:
        messages = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                          VisibilityTimeout=900, WaitTimeSeconds=0,
                                          AttributeNames=['SentTimestamp']).get('Messages', [])
        empty = 0 if messages else empty + 1
        for message in messages:
            task_id = codec.decode(message['Body'], name, check_age=False).task_id
            found.setdefault(task_id, int(message['Attributes']['SentTimestamp']) / 1000.0)
    missing = expected - found.keys()
    if missing:
        raise BenchError('outbox-lag: %d of %d committed tasks never reached the queue'
                         % (len(missing), len(expected)))
    return found


def lag_breakdown(committed: dict[str, float], sent: dict[str, float],
                  rounds: dict[str, Any]) -> str:
    """Where the tasks' lag went (medians and p99, ms), for stderr."""
    by_task = {task_id: entry for entry in rounds['rounds'] for task_id in entry['tasks']}
    parts: dict[str, list[float]] = {'commit to round start': [], 'claim': [],
                                     'send (request returned)': [],
                                     'SentTimestamp to send returned': []}
    for task_id, at in committed.items():
        entry = by_task.get(task_id)
        if entry is None:
            continue
        parts['commit to round start'].append(ms(entry['start'] - at))
        parts['claim'].append(ms(entry['claimed'] - entry['start']))
        parts['send (request returned)'].append(ms(entry['sent'] - entry['claimed']))
        parts['SentTimestamp to send returned'].append(ms(entry['sent'] - sent[task_id]))
    text = ', '.join('%s %.1f/%.1f' % (label, percentile(values, 0.5), percentile(values, 0.99))
                     for label, values in parts.items() if values)
    return 'per task, p50/p99 ms: %s; %s' % (text, round_summary(rounds))


def merged_rounds(paths: Sequence[str]) -> dict[str, Any]:
    """The rounds of several relays as one relay's."""
    merged: dict[str, Any] = {'rounds': [], 'empty': 0, 'empty_seconds': 0.0}
    for path in paths:
        rounds = read_rounds(path)
        merged['rounds'] += rounds['rounds']
        merged['empty'] += rounds['empty']
        merged['empty_seconds'] += rounds['empty_seconds']
    return merged


@contextlib.contextmanager
def relay_processes(env: Environment, url: str, count: int) -> Iterator[tuple[list[int], list[str]]]:
    """``count`` relays (``kale relay --url URL``, each in a process of its
    own); their pids and the files their rounds go to. Stopped with SIGTERM."""
    paths = [env.report_path() + '.rounds' for _ in range(count)]
    relays: list[subprocess.Popen] = []
    try:
        for path in paths:
            relays.append(subprocess.Popen(relay_command(url, '--rounds', path), cwd=ROOT,
                                           env=env.worker_env()))
        yield [relay.pid for relay in relays], paths
    finally:
        for relay in relays:
            relay.send_signal(signal.SIGTERM)
        for relay in relays:
            try:
                relay.wait(30)
            except subprocess.TimeoutExpired:
                relay.kill()
                relay.wait()


def lag_side(env: Environment, databases: Databases, rate: float, seconds: float,
             poll: bool, relays: int = 1) -> dict[str, float]:
    from bench.workflows import cpu_seconds
    what = 'outbox-lag-poll' if poll else 'outbox-lag'
    run = env.new_run()
    try:
        with databases.database(env) as url:
            engine = open_outbox(url)
            try:
                with notify_trigger(engine, not poll), \
                        relay_processes(env, url, relays) as (pids, rounds_paths):
                    for _ in range(2):          # the relays connected, listening, warm
                        for number in range(relays):
                            publish_one(engine, -1 - number)
                        wait_empty(engine, what, timeout=60)
                        time.sleep(0.3)
                    cpu, started = cpu_seconds(pids), time.monotonic()
                    committed, reached = publish_at(engine, rate, seconds)
                    wait_empty(engine, what)
                    cpu = (cpu_seconds(pids) - cpu) / (time.monotonic() - started)
            finally:
                engine.dispose()
        sent = sent_timestamps(env, run, set(committed))
    finally:
        run.close()
    lags = [ms(sent[task_id] - at) for task_id, at in committed.items()]
    print('bench: %s: %s' % (what, lag_breakdown(committed, sent, merged_rounds(rounds_paths))),
          file=sys.stderr)
    return {'p50': percentile(lags, 0.5), 'p99': percentile(lags, 0.99), 'rate': reached,
            'cpu': 100.0 * cpu}


def lag_figures(env: Environment, databases: Databases, rate: float, seconds: float,
                poll: bool, relays: int = 1) -> Figures:
    result = lag_side(env, databases, rate, seconds, poll, relays)
    names = lag_figure_names(poll, rate)
    return {names[key]: (value, None) for key, value in result.items()}


# --- outbox-publish -----------------------------------------------------------------------

def orders_table() -> Any:
    from sqlalchemy import BigInteger, Column, Float, Integer, MetaData, String, Table
    return Table('kale_bench_orders', MetaData(),
                 Column('id', BigInteger().with_variant(Integer, 'sqlite'), primary_key=True,
                        autoincrement=True),
                 Column('note', String(64), nullable=False),
                 Column('created_at', Float, nullable=False))


def time_transactions(engine: Any, transactions: int) -> dict[str, list[float]]:
    """Seconds of each transaction: ``plain`` (an order inserted), ``one``
    (and outbox.publish), ``batch`` (and outbox.publish_batch of 100)."""
    from kale import outbox
    orders = orders_table()

    def transaction(publish: int) -> float:
        started = time.perf_counter()
        with engine.begin() as conn:
            conn.execute(orders.insert().values(note='order', created_at=time.time()))
            if publish == 1:
                outbox.publish(conn, tasks.NoopTask, None, 1)
            elif publish:
                outbox.publish_batch(conn, tasks.NoopTask, None,
                                     [((i,), {}) for i in range(publish)])
        return time.perf_counter() - started

    times: dict[str, list[float]] = {'plain': [], 'one': [], 'batch': []}
    for _ in range(WARM_UP):
        transaction(0)
        transaction(1)
    for number in range(transactions):
        kinds = [('plain', 0), ('one', 1)]
        if number % 10 == 0:
            kinds.append(('batch', BATCH))
        if number % 2:
            kinds.reverse()
        for kind, publish in kinds:
            times[kind].append(transaction(publish))
    return times


def direct_publish_seconds(samples: int) -> tuple[float, float]:
    """Median seconds of one Task.publish call, and of a publish_batch of 100 per task."""
    tasks.NoopTask.publish(None, 0)                      # connection warm
    single = []
    for number in range(samples):
        started = time.perf_counter()
        tasks.NoopTask.publish(None, number)
        single.append(time.perf_counter() - started)
    batch = []
    for _ in range(max(3, samples // 20)):
        started = time.perf_counter()
        tasks.NoopTask.publish_batch(None, [((i,), {}) for i in range(BATCH)])
        batch.append((time.perf_counter() - started) / BATCH)
    return statistics.median(single), statistics.median(batch)


def publish_figures(env: Environment, databases: Databases, transactions: int) -> Figures:
    from sqlalchemy import delete, func, select

    from kale.store.sql.outbox_schema import outbox as outbox_table
    orders = orders_table()
    run = env.new_run()
    try:
        with databases.database(env) as url:
            engine = open_outbox(url)
            try:
                orders.create(engine, checkfirst=True)
                with engine.begin() as conn:
                    last = conn.execute(select(func.max(outbox_table.c.id))).scalar() or 0
                try:
                    times = time_transactions(engine, transactions)
                finally:                    # a database given may be used again
                    with engine.begin() as conn:
                        conn.execute(delete(outbox_table).where(outbox_table.c.id > last))
                    orders.drop(engine)
            finally:
                engine.dispose()
        single, batch = direct_publish_seconds(min(transactions, 200))
    finally:
        run.close()
    plain, one, hundred = (statistics.median(times[kind]) for kind in ('plain', 'one', 'batch'))
    return {TRANSACTION: (ms(one), ms(plain)),
            PUBLISH_COST: (ms(one - plain), ms(single)),
            BATCH_COST: (ms(hundred - plain) / BATCH, ms(batch))}


# --- the command line and the summary -----------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--outbox-url', default='', metavar='URL',
                        help='the outbox scenarios: the application database (postgresql://... '
                             'or sqlite:///..., a database of their own; sqlite: a fresh file '
                             'a run) instead of a throwaway PostgreSQL cluster')
    parser.add_argument('--outbox-sync-commit', choices=['on', 'off'], default='on',
                        help="the throwaway cluster's synchronous_commit (default on, "
                             "PostgreSQL's: each commit waits for its WAL flush)")
    parser.add_argument('--outbox-tasks', type=int, default=DEFAULT_TASKS, metavar='N',
                        help='outbox-relay: tasks relayed a run (default %d)' % DEFAULT_TASKS)
    parser.add_argument('--outbox-rate', type=float, default=DEFAULT_RATE, metavar='R',
                        help='outbox-lag(-poll): commits a second (default %g)' % DEFAULT_RATE)
    parser.add_argument('--outbox-seconds', type=float, default=DEFAULT_SECONDS, metavar='S',
                        help='outbox-lag(-poll): how long they commit (default %g)'
                        % DEFAULT_SECONDS)
    parser.add_argument('--outbox-relays', type=int, default=1, metavar='K',
                        help='outbox-lag(-poll): relay processes on the database (default 1; '
                             'PostgreSQL only for more)')
    parser.add_argument('--outbox-transactions', type=int, default=DEFAULT_TRANSACTIONS,
                        metavar='M', help='outbox-publish: transactions timed of each kind '
                        '(default %d)' % DEFAULT_TRANSACTIONS)
    parser.add_argument('--outbox-profile', action='store_true',
                        help="outbox-relay: print the relay's cProfile (own time) on stderr")


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    chosen = [name for name in SCENARIOS if name in args.scenarios]
    if chosen and args.transport == 'memory':
        parser.error('%s: the relay is a process of its own: it needs the SQS transport'
                     % chosen[0])
    if min(args.outbox_tasks, args.outbox_transactions, args.outbox_relays) < 1 \
            or args.outbox_rate <= 0 or args.outbox_seconds <= 0:
        parser.error('--outbox-tasks, --outbox-rate, --outbox-seconds, --outbox-transactions '
                     'and --outbox-relays must be positive')
    if args.outbox_relays > 1 and args.outbox_url.startswith('sqlite'):
        parser.error('--outbox-relays: SQLite allows one relay per database')
    if 'outbox-lag' in args.scenarios and args.outbox_url.startswith('sqlite'):
        parser.error('outbox-lag measures LISTEN/NOTIFY, which SQLite lacks: on SQLite the '
                     'relay polls (outbox-lag-poll)')


def describe(args: argparse.Namespace) -> dict[str, Any]:
    """The outbox scenarios' settings, for --json."""
    return {'database': Databases(args.outbox_url, args.outbox_sync_commit).describe(),
            'tasks': args.outbox_tasks, 'rate': args.outbox_rate,
            'seconds': args.outbox_seconds, 'relays': args.outbox_relays,
            'transactions': args.outbox_transactions}


def summary(configurations: Sequence[dict[str, Any]], rate: float) -> str:
    """The targets side by side, one column per configuration; '' when no
    outbox scenario ran."""
    def cell(results: dict[str, Any], figure: str, unit: str, baseline: bool = True) -> str:
        result = results.get(figure)
        if not result or not result.get('kale'):
            return ''
        text = '%s%s' % (number(result['kale']['median']), unit)
        if baseline and result.get('baseline'):
            text += ' (%s%s, %.2fx)' % (number(result['baseline']['median']), unit,
                                        result.get('ratio', 0.0))
        if 'met' in result:
            text += ': %s' % ('met' if result['met'] else 'NOT met')
        return text

    listen, poll = lag_figure_names(False, rate), lag_figure_names(True, rate)
    rows: list[tuple[str, ...]] = [('',) + tuple(c['label'] for c in configurations)]
    for label, figure, unit, baseline in (
            ('relay, tasks/s (publish_batch of 100); >= 0.8x', RELAY, '/s', True),
            ('lag p50, LISTEN/NOTIFY; <= 20 ms', listen['p50'], ' ms', False),
            ('lag p99, LISTEN/NOTIFY; <= 100 ms', listen['p99'], ' ms', False),
            ('lag p50, poll only', poll['p50'], ' ms', False),
            ('lag p99, poll only', poll['p99'], ' ms', False),
            ('outbox.publish per task (one Task.publish); <= 0.5 ms', PUBLISH_COST, ' ms', True),
            ('outbox.publish_batch of 100 per task (publish_batch)', BATCH_COST, ' ms', True)):
        cells = tuple(cell(c['results'], figure, unit, baseline) for c in configurations)
        if any(cells):
            rows.append((label,) + cells)
    if len(rows) == 1:
        return ''
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return '\n'.join(' | '.join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in rows)


def number(value: float) -> str:
    return '%.3g' % value if abs(value) < 100 else '%.0f' % value


if __name__ == '__main__':
    if sys.argv[1:2] != ['relay']:
        sys.exit('usage: python -m bench.outbox relay URL [--burst REPORT] [--rounds FILE] '
                 '[--profile FILE]')
    from bench import outbox  # the RoundLog patches by their importable name
    sys.exit(outbox.relay_main(sys.argv[2:]))
