"""The fleet benchmark (`python -m bench --scenarios fleet`): where a fleet
of workers sharing one PostgreSQL tops out, and what each task costs.

For each fleet size N (``--fleet-workers``, default 1,2,4,8), on a fresh
database of a throwaway PostgreSQL cluster (with pg_stat_statements when
the server has it) and fresh queues:

1. *Submitting* (untimed, counted): ``--fleet-tasks`` / 100 chords, each a
   group of 100 coroutine no-ops (:class:`bench.tasks.FleetTask`, under a
   rate limit never reached: one bucket all the workers ask; or
   ``--fleet-limit concurrency``) and a callback, submitted from this
   process with task records on.
2. *Working* (timed, counted): N ``kale worker --pool asyncio`` processes
   with task records, workflows and the flow limit on the same database,
   started and held at a gate until the last one is up, then let go
   together; timed from the gate to the moment the last task's message was
   deleted.

Per N it reports throughput (members and callbacks a second); CPU per task
of the workers (all processes, ``/proc``) and of PostgreSQL (the
postmaster and its children, reaped ones included); and per task: SQS
requests by kind (botocore's own count in each process), database
statements by kind (pg_stat_statements: calls, BEGIN and COMMIT included),
transactions (COMMITs), the workers' round trips to the database (calls
into the driver: an executemany, pipelined, is one), rows written
(pg_stat_database) and WAL bytes (the WAL position's advance). On a small
machine the workers and PostgreSQL share the cores: CPU per task says
what a core buys, throughput only what this machine did.

    python -m bench.fleet_scale worker [kale worker options]
"""
from __future__ import annotations

import atexit
import collections
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from typing import Any, Iterator, Optional, Sequence

from bench.environment import ROOT, Environment
from bench.hooks import REPORT_VARIABLE
from bench.outbox import Cluster
from bench.scenarios import Figures
from bench.servers import BenchError
from bench.workflows import QUEUE, SETTLE_VARIABLE, SettleLog, cpu_seconds
from kale.hooks import WorkerHooks

SCENARIO = 'fleet'
SIZES = (1, 2, 4, 8)
CHORD_WIDTH = 100
DEFAULT_TASKS = 4000
DEFAULT_IN_FLIGHT = 100
#: The gate file's name ($KALE_BENCH_GATE): workers wait for it after start-up.
GATE_VARIABLE = 'KALE_BENCH_GATE'
WORKER_START_SEC = 120.0
#: The server settings of the benchmark's cluster.
PG_OPTIONS = ('shared_preload_libraries=pg_stat_statements', 'pg_stat_statements.track=all',
              'max_connections=200')


# --- in the worker -----------------------------------------------------------------------

class RoundTrips:
    """Calls this process makes into psycopg that reach the server: execute
    (and the BEGIN psycopg sends before the first statement of a
    transaction), executemany (pipelined: one), commit, rollback (a commit
    in pipeline mode goes with the statements before it: not counted)."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()

    def install(self) -> None:
        import psycopg
        from psycopg import pq
        idle = pq.TransactionStatus.IDLE
        counts = self.counts

        def wrap(owner: Any, name: str, kind: Any) -> None:
            original = getattr(owner, name)

            def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
                conn = getattr(self, 'connection', self)
                busy = conn.info.transaction_status != idle
                if name == 'execute' and not busy and not conn.autocommit:
                    counts['BEGIN'] += 1
                if name in ('commit', 'rollback') and (not busy or conn._pipeline):
                    return original(self, *args, **kwargs)       # nothing sent, or sent
                    # with the pipeline's statements, counted already
                counts[kind(args)] += 1
                return original(self, *args, **kwargs)

            setattr(owner, name, counted)

        wrap(psycopg.Cursor, 'execute', lambda args: statement_kind(str(args[0])))
        wrap(psycopg.Cursor, 'executemany',
             lambda args: statement_kind(str(args[0])) + ' (executemany)')
        wrap(psycopg.Connection, 'commit', lambda args: 'COMMIT')
        wrap(psycopg.Connection, 'rollback', lambda args: 'ROLLBACK')


ROUND_TRIPS = RoundTrips()


class GateHooks(WorkerHooks):
    """Holds the worker at start-up until $KALE_BENCH_GATE exists, then
    counts its round trips from there; writes them at exit to
    ``GATE.trips-PID``."""

    def on_worker_startup(self, worker: Any) -> None:
        gate = os.environ.get(GATE_VARIABLE)
        if not gate:
            return
        deadline = time.monotonic() + WORKER_START_SEC
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.005)
        ROUND_TRIPS.counts.clear()
        atexit.register(self._write, '%s.trips-%d' % (gate, os.getpid()))

    @staticmethod
    def _write(path: str) -> None:
        with open(path, 'w') as f:
            json.dump(dict(ROUND_TRIPS.counts), f)


def serve(argv: Sequence[str]) -> int:
    """``kale worker ARGS`` with the settle log, the gate and the round trips counted."""
    from kale import cli
    from kale.conf import settings
    ROUND_TRIPS.install()
    hooks = [*settings.WORKER_HOOKS, 'bench.workflows.SettleHooks', 'bench.fleet_scale.GateHooks']
    with settings.override(WORKER_HOOKS=hooks):
        return cli.main(['worker', *argv])


# --- the database ------------------------------------------------------------------------

_KIND = re.compile(r'^\s*(\w+)')
_TABLE = re.compile(r'\b(kale_\w+)')


def statement_kind(sql: str) -> str:
    """``INSERT kale_tasks``, ``SELECT kale_rate_buckets``, ``BEGIN``, ``select`` (a ping)..."""
    if sql.strip() in ('', ';'):
        return 'ping (;)'         # SQLAlchemy's pool_pre_ping on psycopg
    verb = _KIND.match(sql)
    table = _TABLE.search(sql)
    word = verb.group(1).upper() if verb else '?'
    if word == 'WITH':          # a CTE: the statement's verb follows it
        found = re.search(r'\)\s*(INSERT|UPDATE|DELETE|SELECT)\b', sql, re.I)
        word = found.group(1).upper() if found else word
    return word + (' ' + table.group(1) if table else '')


class Postgres:
    """The benchmark's cluster: started on first use, a fresh database a run,
    and what the server did meanwhile."""

    def __init__(self) -> None:
        self.cluster: Optional[Cluster] = None
        self.statements = False        # pg_stat_statements loaded

    def describe(self) -> str:
        return 'PostgreSQL (a throwaway cluster%s)' % (
            ', pg_stat_statements' if self.statements else ', no pg_stat_statements')

    def start(self) -> Cluster:
        if self.cluster is None:
            probe = Cluster()
            initdb = os.path.realpath(os.path.join(probe.binaries, 'initdb'))
            library = os.path.join(os.path.dirname(os.path.dirname(initdb)), 'lib',
                                   'pg_stat_statements.so')
            self.statements = os.path.exists(library)
            self.cluster = Cluster('on', PG_OPTIONS if self.statements else ('max_connections=200',))
        if not self.cluster.started:
            self.cluster.start()
            if self.statements:
                self.cluster.admin('CREATE EXTENSION IF NOT EXISTS pg_stat_statements')
        return self.cluster

    @contextlib.contextmanager
    def database(self) -> Iterator[str]:
        cluster = self.start()
        name = 'fleet_%s' % uuid.uuid4().hex[:10]
        cluster.admin('CREATE DATABASE %s' % name)
        try:
            yield name
        finally:
            cluster.admin('DROP DATABASE IF EXISTS %s WITH (FORCE)' % name)

    def snapshot(self, database: str) -> dict[str, Any]:
        """Counters of ``database`` (read from the ``postgres`` one, so the
        reads are not counted) and the server's CPU seconds."""
        import psycopg
        assert self.cluster is not None
        found: dict[str, Any] = {'cpu': self.cpu_seconds(), 'statements': {}, 'exec_ms': {}}
        with psycopg.connect('host=127.0.0.1 port=%d user=kale dbname=postgres'
                             % self.cluster.port, autocommit=True) as conn:
            if self.statements:
                for query, calls, exec_ms in conn.execute(
                        'SELECT s.query, s.calls, s.total_exec_time FROM pg_stat_statements s '
                        'JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s', (database,)):
                    kind = statement_kind(query)
                    found['statements'][kind] = found['statements'].get(kind, 0) + calls
                    found['exec_ms'][kind] = found['exec_ms'].get(kind, 0.0) + exec_ms
            row = conn.execute(
                'SELECT xact_commit, xact_rollback, tup_inserted, tup_updated, tup_deleted, '
                "pg_current_wal_lsn() - '0/0'::pg_lsn FROM pg_stat_database "
                'WHERE datname = %s', (database,)).fetchone()
        assert row is not None
        for name, value in zip(('commits', 'rollbacks', 'inserted', 'updated', 'deleted',
                                'wal_bytes'), row, strict=True):
            found[name] = float(value)
        return found

    def cpu_seconds(self) -> float:
        """User + system CPU of the postmaster and every process it started
        (its reaped children's too: a backend that exited keeps counting)."""
        assert self.cluster is not None
        with open(os.path.join(self.cluster.root, 'data', 'postmaster.pid')) as f:
            postmaster = int(f.readline())
        ticks = os.sysconf('SC_CLK_TCK')
        total = 0
        for entry in os.listdir('/proc'):
            if not entry.isdigit():
                continue
            try:
                with open('/proc/%s/stat' % entry) as f:
                    fields = f.read().rsplit(')', 1)[1].split()
            except OSError:
                continue                # gone meanwhile
            pid, parent = int(entry), int(fields[1])
            if pid == postmaster:
                total += sum(int(v) for v in fields[11:15])    # utime stime cutime cstime
            elif parent == postmaster:
                total += int(fields[11]) + int(fields[12])
        return total / ticks

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()


def since(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """What happened between two snapshots."""
    found = {name: after[name] - before[name] for name in after
             if name not in ('statements', 'exec_ms')}
    for name in ('statements', 'exec_ms'):
        changed = {kind: value - before[name].get(kind, 0)
                   for kind, value in after[name].items()}
        found[name] = {kind: value for kind, value in changed.items() if value}
    return found


# --- one fleet ---------------------------------------------------------------------------

def submit_backlog(chords: int, member: Any) -> None:
    """``chords`` chords of :data:`CHORD_WIDTH` members and a callback."""
    from bench.tasks import FleetCollect
    from kale import workflow
    for _ in range(chords):
        workflow.submit(workflow.chord(
            workflow.group(*(member.s(i) for i in range(CHORD_WIDTH))), FleetCollect.s()))


@contextlib.contextmanager
def fleet(env: Environment, size: int, in_flight: int, settle_path: str, gate: str
          ) -> Iterator[list[tuple[int, str]]]:
    """``size`` workers on :data:`QUEUE`, up and held at the gate when the
    block starts (yields (pid, report path) each); stopped at its end."""
    processes = []
    for _ in range(size):
        report = env.report_path()
        processes.append((subprocess.Popen(
            [sys.executable, '-m', 'bench.fleet_scale', 'worker', '--log-level', 'WARNING',
             '--queues', QUEUE, '--pool', 'asyncio', '--max-in-flight', str(in_flight)],
            cwd=ROOT, env=env.worker_env(**{SETTLE_VARIABLE: settle_path, GATE_VARIABLE: gate,
                                            REPORT_VARIABLE: report})), report))
    try:
        started_by = time.monotonic() + WORKER_START_SEC
        for process, _ in processes:
            while not os.path.exists('%s.ready-%d' % (settle_path, process.pid)):
                if process.poll() is not None or time.monotonic() > started_by:
                    raise BenchError('fleet: a worker did not start (exit code %s)'
                                     % process.poll())
                time.sleep(0.05)
        yield [(process.pid, report) for process, report in processes]
    finally:
        for process, _ in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process, _ in processes:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def one_fleet(env: Environment, postgres: Postgres, size: int, tasks: int, in_flight: int,
              limit: str) -> dict[str, Any]:
    """Submit the backlog, then let ``size`` workers drain it; what it cost."""
    from bench import tasks as bench_tasks
    from kale import records
    from kale.app import default_app
    from kale.records.recorder import reset_recorders
    member = bench_tasks.FleetTask if limit == 'rate' else bench_tasks.FleetSlottedTask
    chords = max(1, round(tasks / CHORD_WIDTH))
    total = chords * (CHORD_WIDTH + 1)
    with postgres.database() as database:
        assert postgres.cluster is not None
        url = postgres.cluster.url(database)
        run = env.new_run(records_url=url, rate_limit_url=url)
        settle = SettleLog(os.path.join(env.workdir, 'fleet-%s.log' % uuid.uuid4().hex[:8]))
        gate = settle.path + '.go'
        try:
            records.store(url).migrate()
            start = postgres.snapshot(database)
            submit_backlog(chords, member)
            default_app().recorder.flush(60)
            submitted = postgres.snapshot(database)
            submit_requests = run.counter.by_operation()
            with fleet(env, size, in_flight, settle.path, gate) as workers:
                pids = [pid for pid, _ in workers]
                cpu, before = cpu_seconds(pids), postgres.snapshot(database)
                open(gate, 'w').close()
                opened = time.time()
                settle.wait_count(total, 'fleet of %d' % size)
                ended = max(settle.settled.values())
                cpu, pg_cpu = cpu_seconds(pids) - cpu, postgres.cpu_seconds() - before['cpu']
            after = postgres.snapshot(database)
        finally:
            run.close()
            reset_recorders()
        working = collections.Counter(
            operation for _, report in workers for at, operation in _read(report)['requests']
            if opened <= at <= ended)
        trips: collections.Counter[str] = collections.Counter()
        for pid in pids:
            trips.update(_read('%s.trips-%d' % (gate, pid)))
    return {'size': size, 'tasks': total, 'seconds': ended - opened, 'cpu': cpu,
            'pg_cpu': pg_cpu, 'submit_requests': submit_requests, 'requests': dict(working),
            'submitted': since(submitted, start), 'worked': since(after, before),
            'round_trips': dict(trips)}


def _read(path: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise BenchError('fleet: %s was not written' % path)
        time.sleep(0.05)
    with open(path) as f:
        return json.load(f)


# --- figures -----------------------------------------------------------------------------

def names(size: int) -> dict[str, str]:
    fleet_of = 'fleet of %d: ' % size
    return {
        'rate': fleet_of + 'tasks/s',
        'cpu': fleet_of + 'workers CPU per task (µs)',
        'pg_cpu': fleet_of + 'PostgreSQL CPU per task (µs)',
        'busy': fleet_of + 'cores busy (workers + PostgreSQL)',
        'sqs': fleet_of + 'SQS requests per task, working',
        'statements': fleet_of + 'database statements per task, working',
        'transactions': fleet_of + 'database transactions per task, working',
        'round_trips': fleet_of + "database round trips per task, working (workers')",
        'rows': fleet_of + 'rows written per task, working',
        'wal': fleet_of + 'WAL bytes per task, working',
        'submit_sqs': 'fleet: SQS requests per task, submitting',
        'submit_statements': 'fleet: database statements per task, submitting',
        'submit_transactions': 'fleet: database transactions per task, submitting',
        'submit_wal': 'fleet: WAL bytes per task, submitting',
    }


def figures(env: Environment, postgres: Postgres, sizes: Sequence[int], tasks: int,
            in_flight: int, limit: str) -> Figures:
    """One run of every fleet size; prints the costs by kind on stderr."""
    if env.memory:
        raise BenchError('fleet runs worker processes: it needs an SQS endpoint')
    found: Figures = {}
    for size in sizes:
        result = one_fleet(env, postgres, size, tasks, in_flight, limit)
        n, figure = result['tasks'], names(size)
        worked, submitted = result['worked'], result['submitted']
        statements = sum(worked['statements'].values()) if postgres.statements else None
        for key, value in (
                ('rate', n / result['seconds']), ('cpu', 1e6 * result['cpu'] / n),
                ('pg_cpu', 1e6 * result['pg_cpu'] / n),
                ('busy', (result['cpu'] + result['pg_cpu']) / result['seconds']),
                ('sqs', sum(result['requests'].values()) / n),
                ('statements', statements / n if statements is not None else None),
                ('transactions', worked['statements'].get('COMMIT', worked['commits']) / n),
                ('round_trips', sum(result['round_trips'].values()) / n),
                ('rows', (worked['inserted'] + worked['updated'] + worked['deleted']) / n),
                ('wal', worked['wal_bytes'] / n),
                ('submit_sqs', sum(result['submit_requests'].values()) / n),
                ('submit_statements', sum(submitted['statements'].values()) / n
                 if postgres.statements else None),
                ('submit_transactions', submitted['statements'].get('COMMIT', 0) / n),
                ('submit_wal', submitted['wal_bytes'] / n)):
            found[figure[key]] = (value, None)
        print_costs(result)
    return found


def print_costs(result: dict[str, Any]) -> None:
    """The per-task costs of one fleet by kind, on stderr."""
    n = result['tasks']

    def line(label: str, counts: dict[str, float]) -> str:
        return '  %s: %s' % (label, ', '.join('%s %.3f' % (kind, count / n) for kind, count in
                                              sorted(counts.items(), key=lambda kv: -kv[1])))
    worked = result['worked']
    exec_us = {kind: 1000.0 * ms for kind, ms in worked['exec_ms'].items()}
    print('bench: fleet of %d, %d tasks in %.1fs; per task:\n%s\n%s\n%s\n%s\n%s\n%s\n'
          '  rows: %.2f inserted, %.2f updated, %.2f deleted; WAL %.0f bytes working, '
          '%.0f submitting' % (
              result['size'], n, result['seconds'],
              line('SQS working', result['requests']),
              line('SQS submitting', result['submit_requests']),
              line('statements working', worked['statements']),
              line('statements working, time in the server (µs)', exec_us),
              line('statements submitting', result['submitted']['statements']),
              line("workers' round trips", result['round_trips']),
              worked['inserted'] / n, worked['updated'] / n, worked['deleted'] / n,
              worked['wal_bytes'] / n, result['submitted']['wal_bytes'] / n),
          file=sys.stderr, flush=True)


NOTE = ('The workers and PostgreSQL share this machine\'s %d cores: past a fleet that keeps '
        'them busy, more workers only share the same CPU, so CPU per task says what a core '
        'buys, and throughput only what this machine did.')


def summary(configurations: Sequence[dict[str, Any]], sizes: Sequence[int]) -> str:
    """Per configuration, a row per fleet size (medians); '' when fleet did not run."""
    columns = (('tasks/s', 'rate', '%.0f'), ('workers µs/task', 'cpu', '%.0f'),
               ('PostgreSQL µs/task', 'pg_cpu', '%.0f'), ('cores busy', 'busy', '%.2f'),
               ('SQS req/task', 'sqs', '%.2f'), ('statements/task', 'statements', '%.2f'),
               ('transactions/task', 'transactions', '%.3f'),
               ('round trips/task', 'round_trips', '%.2f'), ('WAL bytes/task', 'wal', '%.0f'))
    lines = []
    for configuration in configurations:
        results = configuration['results']
        rows = [('workers',) + tuple(title for title, _, _ in columns)]
        for size in sizes:
            figure = names(size)
            if figure['rate'] not in results:
                continue
            rows.append((str(size),) + tuple(
                fmt % results[figure[key]]['kale']['median']
                if results.get(figure[key], {}).get('kale') else '-'
                for _, key, fmt in columns))
        if len(rows) > 1:
            widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
            lines.append(configuration['label'])
            lines += ['  ' + ' | '.join(cell.rjust(w) for cell, w in zip(row, widths, strict=True))
                      for row in rows]
    if not lines:
        return ''
    return '\n'.join(lines + [NOTE % (os.cpu_count() or 1)])


if __name__ == '__main__':
    if sys.argv[1:2] != ['worker']:
        sys.exit('usage: python -m bench.fleet_scale worker [kale worker options]')
    from bench import fleet_scale  # the hooks by their importable name
    sys.exit(fleet_scale.serve(sys.argv[2:]))
