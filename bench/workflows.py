"""Workflows beside the same tasks without one: the `workflow-chord` and
`workflow-chain` scenarios (issue 26), run only when named in --scenarios.

- ``workflow-chord``: ``chord(group(Noop.s(0), ..., Noop.s(W - 1)),
  Collect.s())`` submitted, timed from just before ``workflow.submit()`` to
  the moment its last task was settled: the callback's message deleted (or,
  with two workers, the last member's, whose delete may return after the
  callback, published before it, ran on the other worker); beside it, the
  same W no-op tasks published flat with one ``publish_batch`` call, timed
  from just before the call to the moment the last of them was settled. The
  target: the chord within 1.3x the flat time.
- ``workflow-chain``: a chain of L no-op nodes, timed from just before
  ``workflow.submit()`` to the moment the last node was settled; beside it,
  L times one task's publish-to-settle time (one ``publish()``, timed to the
  moment that task was settled), measured in the same run on the same
  workers, interleaved with the chains (median of several of each). The
  target: the chain within 1.5x of L single tasks.

Both sides run with task records on (a fresh SQLite file a side, or the
``--workflow-records-url`` given, e.g. PostgreSQL) and the same workers:
``--workflow-workers`` `kale worker` processes (serial pool) on the one
queue the tasks use, started and idle before anything is timed, and stopped
afterwards. A task is settled when the request that deleted its message
has returned: each worker appends one line per settled task (its id and
``time.time()``) to a file the benchmark reads (see :class:`SettleHooks`).
CPU per task is the workers' user + system time (``/proc/PID/stat``) over
the timed window.

A worker here is ``python -m bench.workflows worker ...``: ``kale worker``
itself (``kale.cli.main``), with :class:`SettleHooks` added to the bench
settings' ``WORKER_HOOKS``. With ``--workflow-trace`` ($KALE_BENCH_TRACE=1)
the workers also time the workflow's work, the records' settle and every
SQL statement (:class:`Timers`), and the benchmark prints it per task on
stderr with a timeline of the chord.
"""
from __future__ import annotations

import collections
import contextlib
import glob
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any, Callable, Iterator, Optional, Sequence

from bench.environment import ROOT, Environment
from bench.scenarios import Figures, alternating
from bench.servers import BenchError
from kale import task
from kale.events import Outcome
from kale.hooks import WorkerHooks

#: The queue every task of these scenarios uses (the workers serve only it).
QUEUE = 'bench_default'
#: Where a worker appends a line per settled task ($KALE_BENCH_SETTLE_FILE).
SETTLE_VARIABLE = 'KALE_BENCH_SETTLE_FILE'
#: Set to 1, workers also append ``task_id time start`` as each task starts.
TRACE_VARIABLE = 'KALE_BENCH_TRACE'
#: How many of the costliest labels --workflow-trace prints.
TRACE_LINES = 16
#: How long worker processes may take to start, and to finish one scenario side.
WORKER_START_SEC = 60.0
DONE_TIMEOUT_SEC = 600.0
#: After the workers are ready, before anything is timed: their first receives.
WARM_UP_SEC = 1.0
#: Pause between two chain-scenario samples, so that each finds the workers idle.
SAMPLE_PAUSE_SEC = (0.05, 0.3)
#: How often the benchmark reads the settle file while it waits.
POLL_SEC = 0.005


# --- the tasks ---------------------------------------------------------------------------

class Noop(task.Task):
    """Returns its first argument (a chain passes it on); does nothing else."""

    queue = QUEUE
    time_limit = 10

    def run_task(self, *args: Any, **kwargs: Any) -> Any:
        return args[0] if args else None


class Collect(task.Task):
    """A chord's callback: how many results it was given."""

    queue = QUEUE
    time_limit = 30

    def run_task(self, values: Sequence[Any], *more: Any) -> int:
        return len(values)


# --- in the worker -----------------------------------------------------------------------

class SettleHooks(WorkerHooks):
    """Appends ``task_id time.time()`` to $KALE_BENCH_SETTLE_FILE for each
    task that succeeded, as soon as the request that deleted its message has
    returned (the worker reports settled tasks later, after its next
    receive, which may wait out a long poll); creates ``FILE.ready-PID`` once
    the worker has started. With $KALE_BENCH_TRACE=1, also
    ``task_id time start`` as each task starts."""

    def __init__(self) -> None:
        self.fd: Optional[int] = None
        self.trace = os.environ.get(TRACE_VARIABLE) == '1'
        #: Receipt handle -> task id, for the tasks that succeeded and are not deleted yet.
        self.succeeded: dict[str, str] = {}

    def on_worker_startup(self, worker: Any) -> None:
        path = os.environ.get(SETTLE_VARIABLE)
        if not path:
            return
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        transport = worker.broker.transport
        delete_batch = transport.delete_batch

        def timed_delete_batch(queue: str, receipt_handles: Sequence[str]) -> list[str]:
            failed = delete_batch(queue, receipt_handles)
            self.deleted(receipt_handles, failed)
            return failed

        transport.delete_batch = timed_delete_batch
        open('%s.ready-%d' % (path, os.getpid()), 'w').close()

    def deleted(self, receipt_handles: Sequence[str], failed: Sequence[str]) -> None:
        now = b' %.6f\n' % time.time()
        lines = []
        for handle in receipt_handles:
            task_id = self.succeeded.pop(handle, None)
            if task_id is not None and handle not in failed:
                lines.append(task_id.encode() + now)
        if lines and self.fd is not None:
            os.write(self.fd, b''.join(lines))

    def on_task_started(self, queue: Any, received: Any, message: Any) -> None:
        if self.fd is not None and self.trace:
            os.write(self.fd, b'%s %.6f start\n' % (message.task_id.encode(), time.time()))

    def on_task_finished(self, settlement: Any) -> None:
        if self.fd is not None and settlement.message is not None and \
                settlement.outcome is Outcome.SUCCEEDED:
            self.succeeded[settlement.received.receipt_handle] = settlement.message.task_id

    def on_worker_shutdown(self, worker: Any) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
            if self.trace:
                with open('%s.trace-%d' % (os.environ[SETTLE_VARIABLE], os.getpid()), 'w') as f:
                    json.dump(TIMERS.report(), f)


class Timers:
    """Wall time spent in some functions of this process, by label (the
    worker's, with $KALE_BENCH_TRACE=1): what a workflow's node costs."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.calls: collections.Counter[str] = collections.Counter()

    def add(self, label: str, seconds: float) -> None:
        self.seconds[label] += seconds
        self.calls[label] += 1

    def wrap(self, owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.add(label, time.perf_counter() - started)

        setattr(owner, name, timed)

    def install(self) -> None:
        """Time the workflow's work in a worker, the records' settle, and
        every SQL statement by kind (a BEGIN IMMEDIATE waits for SQLite's
        write lock)."""
        from sqlalchemy import event
        from sqlalchemy.engine import Engine
        from sqlalchemy.engine.default import DefaultDialect

        from kale.publisher import Publisher
        from kale.records.hooks import RecordsHooks
        from kale.workflow import run
        from kale.workflow.state import WorkflowState
        self.wrap(run.WorkflowHooks, 'on_task_finished', 'workflow hook (on_task_finished)')
        for hook in ('before_settle', 'after_batch'):   # if a batch's nodes move on together
            if hook in vars(run.WorkflowHooks):
                self.wrap(run.WorkflowHooks, hook, 'workflow hook (%s)' % hook)
        self.wrap(WorkflowState, 'complete', 'WorkflowState.complete')
        self.wrap(WorkflowState, 'mark_published', 'WorkflowState.mark_published')
        self.wrap(WorkflowState, 'stranded', 'sweep: WorkflowState.stranded')
        self.wrap(WorkflowState, 'overdue', 'sweep: WorkflowState.overdue')
        self.wrap(run, 'publish_nodes', 'publish_nodes')
        self.wrap(Publisher, 'publish_batch', 'Publisher.publish_batch')
        self.wrap(RecordsHooks, 'before_settle', 'records: before_settle')

        @event.listens_for(Engine, 'before_cursor_execute')
        def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            conn.info['bench_sql_at'] = time.perf_counter()

        @event.listens_for(Engine, 'after_cursor_execute')
        def after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            started = conn.info.pop('bench_sql_at', None)
            if started is not None:
                self.add('sql: ' + ' '.join(statement.split()[:3])[:48],
                         time.perf_counter() - started)

        self.wrap(DefaultDialect, 'do_commit', 'sql: COMMIT')

    def report(self) -> dict[str, list[float]]:
        return {label: [seconds, self.calls[label]] for label, seconds in self.seconds.items()}


#: This process's timers, when tracing.
TIMERS = Timers()


def serve(argv: Sequence[str]) -> int:
    """``kale worker ARGS`` in this process, with :class:`SettleHooks` added
    (and, with $KALE_BENCH_TRACE=1, :data:`TIMERS` installed)."""
    from kale import cli
    from kale.conf import settings
    if os.environ.get(TRACE_VARIABLE) == '1':
        TIMERS.install()
    hooks = [*settings.WORKER_HOOKS, 'bench.workflows.SettleHooks']
    with settings.override(WORKER_HOOKS=hooks):
        return cli.main(['worker', *argv])


# --- in the benchmark --------------------------------------------------------------------

class SettleLog:
    """What the workers appended to a settle file: task id -> when settled."""

    def __init__(self, path: str):
        self.path = path
        self.settled: dict[str, float] = {}
        #: The workers' timers, once they stopped (with $KALE_BENCH_TRACE=1).
        self.trace: dict[str, list[float]] = {}
        #: With $KALE_BENCH_TRACE=1: task id -> when it started.
        self.started: dict[str, float] = {}
        self._offset = 0
        self._partial = b''

    def read(self) -> None:
        try:
            with open(self.path, 'rb') as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b'\n')
        for line in lines:
            task_id, at, *event = line.split()
            if not event:
                self.settled.setdefault(task_id.decode(), float(at))
            else:
                self.started.setdefault(task_id.decode(), float(at))

    def wait_for(self, task_id: str, what: str) -> None:
        """Until ``task_id`` is settled."""
        self.wait(lambda: task_id in self.settled, what)

    def wait_count(self, count: int, what: str) -> None:
        """Until ``count`` tasks are settled."""
        self.wait(lambda: len(self.settled) >= count, what)

    def wait(self, done: Callable[[], bool], what: str, timeout: float = DONE_TIMEOUT_SEC) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.read()
            if done():
                return
            if time.monotonic() > deadline:
                raise BenchError('%s: not settled within %gs (%d tasks settled)'
                                 % (what, timeout, len(self.settled)))
            time.sleep(POLL_SEC)


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU of these processes, every thread (Linux /proc)."""
    ticks = os.sysconf('SC_CLK_TCK')
    total = 0
    for pid in pids:
        with open('/proc/%d/stat' % pid) as f:
            fields = f.read().rsplit(')', 1)[1].split()
        total += int(fields[11]) + int(fields[12])     # utime, stime (fields 14, 15)
    return total / ticks


@contextlib.contextmanager
def worker_processes(env: Environment, count: int, settle_path: str) -> Iterator[list[int]]:
    """``count`` worker processes on :data:`QUEUE`, started and idle by the
    time the block starts (yields their pids); stopped with SIGTERM at its end."""
    processes = [subprocess.Popen(
        [sys.executable, '-m', 'bench.workflows', 'worker', '--log-level', 'WARNING',
         '--queues', QUEUE], cwd=ROOT, env=env.worker_env(**{SETTLE_VARIABLE: settle_path}))
        for _ in range(count)]
    try:
        started_by = time.monotonic() + WORKER_START_SEC
        for process in processes:
            while not os.path.exists('%s.ready-%d' % (settle_path, process.pid)):
                if process.poll() is not None or time.monotonic() > started_by:
                    raise BenchError('a workflow bench worker did not start (exit code %s)'
                                     % process.poll())
                time.sleep(0.05)
        time.sleep(WARM_UP_SEC)
        yield [process.pid for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def records_url_for(env: Environment, given: str) -> str:
    """``given`` (a server's URL), or a fresh SQLite file in the run's scratch directory."""
    if given:
        return given
    return 'sqlite:///%s' % os.path.join(env.workdir, 'workflow-%s.db' % uuid.uuid4().hex[:8])


@contextlib.contextmanager
def workflow_run(env: Environment, workers: int, records_url: str
                 ) -> Iterator[tuple[SettleLog, list[int]]]:
    """Fresh queues and records, and ``workers`` idle workers on them."""
    from kale import records
    from kale.records.recorder import reset_recorders
    url = records_url_for(env, records_url)
    run = env.new_run(records_url=url)
    settle = SettleLog(os.path.join(env.workdir, 'settled-%s.log' % uuid.uuid4().hex[:8]))
    try:
        with worker_processes(env, workers, settle.path) as pids:
            records.store(url).migrate()        # the workers did; not timed
            yield settle, pids
        settle.trace = read_traces(settle.path)
    finally:
        run.close()
        reset_recorders()


def read_traces(settle_path: str) -> dict[str, list[float]]:
    """The workers' :class:`Timers`, summed: label -> [seconds, calls]."""
    total: dict[str, list[float]] = {}
    for path in glob.glob(settle_path + '.trace-*'):
        with open(path) as f:
            for label, (seconds, calls) in json.load(f).items():
                entry = total.setdefault(label, [0.0, 0])
                entry[0] += seconds
                entry[1] += calls
    return total


def print_trace(what: str, trace: dict[str, list[float]], tasks: int) -> None:
    """Where the workers' time went (``--workflow-trace``), on stderr."""
    if not trace:
        return
    print('bench: %s: workers spent, per task (%d), in:' % (what, tasks), file=sys.stderr)
    for label, (seconds, calls) in sorted(trace.items(), key=lambda item: -item[1][0])[:TRACE_LINES]:
        print('    %8.3f ms  (%6d calls, %.3f ms each)  %s' % (
            1000.0 * seconds / tasks, calls, 1000.0 * seconds / max(calls, 1), label),
            file=sys.stderr)


def median_ms(values: Sequence[float]) -> float:
    return 1000.0 * statistics.median(values)


# --- workflow-chord -----------------------------------------------------------------------

def chord_figure_names(width: int) -> dict[str, str]:
    return {
        'time': 'workflow-chord of %d: submit to last task settled (s; baseline: the %d tasks '
                'flat, publish_batch to last settled)' % (width, width),
        'call': 'workflow-chord of %d: the submit() call (ms; baseline: the publish_batch call)'
                % width,
        'cpu': 'workflow-chord of %d: workers CPU per task (µs; baseline: flat)' % width,
    }


def chord_side(env: Environment, width: int, workers: int, records_url: str,
               chord: bool) -> dict[str, float]:
    """One side of ``workflow-chord``: seconds to the last settle, seconds in
    the submit/publish call, worker CPU seconds."""
    from kale import workflow
    with workflow_run(env, workers, records_url) as (settle, pids):
        cpu = cpu_seconds(pids)
        started = time.time()
        if chord:
            submitted = workflow.submit(workflow.chord(
                workflow.group(*(Noop.s(i) for i in range(width))), Collect.s()))
        else:
            Noop.publish_batch(None, [((i,), {}) for i in range(width)])
        called = time.time()
        settle.wait_count(width + 1 if chord else width,
                          'workflow-chord' if chord else 'the flat tasks')
        cpu = cpu_seconds(pids) - cpu
        last = max(settle.settled.values())
        if chord:
            if submitted.wait(30) != 'succeeded' or submitted.result() != width:
                raise BenchError('workflow-chord: the chord did not succeed with %d results'
                                 % width)
            if settle.started:          # --workflow-trace: when the callback ran
                [callback] = [node['task_id'] for node in submitted.nodes()
                              if node['task'] == Collect.task_path()]
                members = [at for task_id, at in settle.settled.items() if task_id != callback]
                print('bench: workflow-chord timeline (ms from submit): submit() returned %.0f, '
                      'first member settled %.0f, last %.0f, callback started %.0f, settled %.0f'
                      % tuple(1000.0 * (at - started) for at in (
                          called, min(members), max(members), settle.started[callback],
                          settle.settled[callback])), file=sys.stderr)
    print_trace('workflow-chord, %s side' % ('chord' if chord else 'flat'), settle.trace,
                width + 1 if chord else width)
    return {'seconds': last - started, 'call': called - started, 'cpu': cpu}


_chord_first = [False]


def chord_figures(env: Environment, width: int, workers: int, records_url: str = '') -> Figures:
    """The chord beside the same tasks flat, in alternating order from run to run."""
    chord, flat = alternating(
        _chord_first, lambda: chord_side(env, width, workers, records_url, True),
        lambda: chord_side(env, width, workers, records_url, False))
    names = chord_figure_names(width)
    return {names['time']: (chord['seconds'], flat['seconds']),
            names['call']: (1000.0 * chord['call'], 1000.0 * flat['call']),
            names['cpu']: (1e6 * chord['cpu'] / (width + 1), 1e6 * flat['cpu'] / width)}


# --- workflow-chain -----------------------------------------------------------------------

def chain_figure_names(length: int) -> dict[str, str]:
    return {
        'time': 'workflow-chain of %d: submit to last node settled (ms; baseline: %d x one '
                'task publish to settled)' % (length, length),
        'single': 'workflow-chain: one task, publish to settled (ms)',
        'step': 'workflow-chain of %d: per node (ms; baseline: one task)' % length,
    }


def chain_figures(env: Environment, length: int, samples: int, workers: int,
                  records_url: str = '') -> Figures:
    """Chains of ``length`` and single tasks, interleaved, on the same workers."""
    from kale import workflow
    rng = random.Random(26)
    singles: list[float] = []
    chains: list[float] = []
    with workflow_run(env, workers, records_url) as (settle, _):
        for _ in range(samples):
            started = time.time()
            task_id = Noop.publish(None, 0)
            settle.wait_for(task_id, 'workflow-chain: one task')
            singles.append(settle.settled[task_id] - started)
            time.sleep(rng.uniform(*SAMPLE_PAUSE_SEC))

            before = set(settle.settled)
            started = time.time()
            submitted = workflow.submit(workflow.chain(
                Noop.s(0), *(Noop.s() for _ in range(length - 1))))
            settle.wait_count(len(before) + length, 'workflow-chain')
            ended = max(at for task_id, at in settle.settled.items() if task_id not in before)
            chains.append(ended - started)
            if submitted.status() != 'succeeded':
                raise BenchError('workflow-chain: the chain did not succeed')
            time.sleep(rng.uniform(*SAMPLE_PAUSE_SEC))
    print_trace('workflow-chain (%d chains of %d, %d single tasks)' % (samples, length, samples),
                settle.trace, samples * (length + 1))
    names = chain_figure_names(length)
    single, chain = median_ms(singles), median_ms(chains)
    return {names['time']: (chain, length * single),
            names['single']: (single, None),
            names['step']: (chain / length, single)}


# --- targets and summary ------------------------------------------------------------------

#: The targets of issue 26, as ratios to the baseline.
CHORD_TARGET = 1.3
CHAIN_TARGET = 1.5


def targets(width: int, length: int) -> dict[str, tuple[str, Callable[[float, Optional[float]],
                                                                       bool]]]:
    """Entries for bench.report.TARGETS."""
    return {
        chord_figure_names(width)['time']: (
            '<= %g x flat' % CHORD_TARGET,
            lambda k, b: b is not None and k <= CHORD_TARGET * b),
        chain_figure_names(length)['time']: (
            '<= %g x (%d x one)' % (CHAIN_TARGET, length),
            lambda k, b: b is not None and k <= CHAIN_TARGET * b),
    }


def summary(configurations: Sequence[dict[str, Any]], width: int, length: int) -> str:
    """The two targets side by side, one column per configuration; '' when
    neither scenario ran."""
    rows: list[tuple[str, ...]] = [('',) + tuple(c['label'] for c in configurations)]
    for label, figure, unit in (
            ('chord of %d (flat), s' % width, chord_figure_names(width)['time'], 's'),
            ('chain of %d (%d x one task), ms' % (length, length),
             chain_figure_names(length)['time'], 'ms')):
        cells = []
        for configuration in configurations:
            result = configuration['results'].get(figure)
            if not result or not result.get('kale') or not result.get('baseline'):
                cells.append('')
                continue
            cells.append('%.3g%s (%.3g%s): %.2fx, target %s: %s' % (
                result['kale']['median'], unit, result['baseline']['median'], unit,
                result.get('ratio', 0.0), result.get('target', '-'),
                {True: 'met', False: 'NOT met'}.get(result.get('met'), '-')))
        if any(cells):
            rows.append((label,) + tuple(cells))
    if len(rows) == 1:
        return ''
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return '\n'.join(' | '.join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
                     .rstrip() for row in rows)



if __name__ == '__main__':
    if sys.argv[1:2] != ['worker']:
        sys.exit('usage: python -m bench.workflows worker [kale worker options]')
    from bench import workflows  # the hooks and tasks by their importable name
    sys.exit(workflows.serve(sys.argv[2:]))
