"""Flow control: what asking costs, and how well a fleet keeps a shared rate.

- ``flow-rate``: the `drain` scenario's worker draining no-op tasks under a
  ``rate_limit`` far above any rate it reaches (a token is always there),
  beside the same drain of plain no-op tasks, in the same run. The issue's
  target: >= 0.9x on fauxqs at +10 ms.
- ``flow-concurrency``: the same with a ``concurrency_limit`` never reached
  (a lease taken and given back per run).
- ``flow-fleet``: 2 and then 4 `kale worker` processes share one
  ``rate_limit = '20/s'`` task with a backlog bigger than a minute of it;
  the runs started in a window (``--flow-seconds``, default 60) after a
  warm-up are counted, beside the limit (the baseline): within 5 % is the
  target. Needs an SQS endpoint (worker processes).

The limits are kept on ``--flow-url`` (``sqlite``, the default: a fresh
SQLite file a run; ``postgres``: a fresh database a run on a throwaway
PostgreSQL cluster; or a URL), given to the workers as RATE_LIMIT_URL, with
task records off on both sides. The worker reports how many requests
(statements sent: BEGIN counted, a multi-row INSERT one) and transactions it
sent that store, per task.
"""
from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from typing import Any, Iterator, Optional

from bench import tasks
from bench.environment import Environment
from bench.outbox import Databases
from bench.records import both, forget_records
from bench.scenarios import Figures, kale_pipeline
from bench.servers import BenchError

SCENARIOS = ('flow-rate', 'flow-concurrency', 'flow-fleet')
RATED = [tasks.RatedNoopHighTask, tasks.RatedNoopTask, tasks.RatedNoopLowTask]
SLOTTED = [tasks.SlottedNoopHighTask, tasks.SlottedNoopTask, tasks.SlottedNoopLowTask]
#: The issue's target for a limit far above the rate, against no limit.
TARGET_RATIO = 0.9
#: The fleet's shared rate (FleetRatedTask's) and the share it may be over or under.
FLEET_RATE = 20
FLEET_TOLERANCE = 0.05
#: Seconds after the workers are serving before the window opens: the bucket
#: starts full, and its burst is not what the window measures.
FLEET_WARM_UP_SEC = 3.0
#: Seconds the fleet's processes get to start serving.
FLEET_START_SEC = 60.0
#: Seconds of runs the backlog holds beyond the warm-up and the window: the
#: first workers serving run tasks while the last ones start.
FLEET_SPARE_SEC = 20.0


def names(kind: str) -> dict[str, str]:
    return {'drain': '%s limit never reached/none: worker drain (tasks/s)' % kind,
            'cpu': '%s limit never reached/none: worker CPU per task (µs)' % kind,
            'requests': '%s limit: store requests per task' % kind,
            'transactions': '%s limit: store transactions per task' % kind}


def fleet_figure(workers: int) -> str:
    return 'fleet of %d sharing %d/s: runs/s in the window (limit)' % (workers, FLEET_RATE)


def targets() -> dict[str, tuple[str, Any]]:
    """Entries for bench.report.TARGETS."""
    found: dict[str, tuple[str, Any]] = {}
    for kind in ('rate', 'concurrency'):
        found[names(kind)['drain']] = ('>= %g x none' % TARGET_RATIO,
                                       lambda k, b: b is not None and k >= TARGET_RATIO * b)
    for workers in (2, 4):
        found[fleet_figure(workers)] = (
            'within %d %%' % (100 * FLEET_TOLERANCE),
            lambda k, b: b is not None and abs(k - b) <= FLEET_TOLERANCE * b)
    return found


def databases(flow_url: str) -> Databases:
    """Where each run keeps its limits: see the module's docstring."""
    return Databases('' if flow_url == 'postgres' else (flow_url or 'sqlite'))


def limit_figures(env: Environment, n: int, kind: str, stores: Databases) -> Figures:
    """A drain under a limit never reached, beside one without (order alternating)."""
    limited = RATED if kind == 'rate' else SLOTTED

    def on() -> dict[str, Any]:
        with stores.database(env) as url:
            try:
                return kale_pipeline(env, n, True, noop_tasks=limited, rate_limit_url=url)
            finally:
                forget_records()            # each run has a database of its own
    on_report, off_report = both(lambda: kale_pipeline(env, n, True), on)
    figure = names(kind)
    return {figure['drain']: (on_report['rate'], off_report['rate']),
            figure['cpu']: (on_report['cpu_us_per_task'], off_report['cpu_us_per_task']),
            figure['requests']: (on_report['flow_requests'] / n, None),
            figure['transactions']: (on_report['flow_transactions'] / n, None)}


def fleet_figures(env: Environment, seconds: float, stores: Databases) -> Figures:
    """Runs a second started in the window by a fleet of 2, then 4, workers."""
    if env.memory:
        raise BenchError('flow-fleet runs worker processes: it needs an SQS endpoint '
                         '(--transport sqs)')
    figures: Figures = {}
    for workers in (2, 4):
        with stores.database(env) as url:
            figures[fleet_figure(workers)] = (fleet_rate(env, workers, seconds, url),
                                              float(FLEET_RATE))
    return figures


def fleet_rate(env: Environment, workers: int, seconds: float, url: str) -> float:
    """Start ``workers`` processes on a backlog of FleetRatedTask; the runs a
    second started in ``seconds`` after the warm-up."""
    run = env.new_run(rate_limit_url=url)
    starts_path = os.path.join(env.workdir, 'fleet-%s.txt' % uuid.uuid4().hex[:8])
    backlog = int(FLEET_RATE * (seconds + FLEET_WARM_UP_SEC + FLEET_SPARE_SEC))
    for start in range(0, backlog, 1000):
        tasks.FleetRatedTask.publish_batch(None, [((i,), {}) for i in
                                                  range(start, min(start + 1000, backlog))])
    reports = [env.report_path() for _ in range(workers)]
    # only its queue: an empty one's long poll would hold a worker for seconds
    processes = [env.start_worker('--queues', 'bench_default', KALE_BENCH_LATENCY_FILE=starts_path,
                                  KALE_BENCH_REPORT=report) for report in reports]
    try:
        serving_at = wait_ready(reports, FLEET_START_SEC)
        opens = serving_at + FLEET_WARM_UP_SEC
        time.sleep(max(0.0, opens + seconds + 1.0 - time.time()))
    finally:
        for process in processes:
            with contextlib.suppress(OSError):
                process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(60)
        run.close()
        forget_records()
    starts = sorted(read_starts(starts_path))
    in_window = [t for t in starts if opens <= t < opens + seconds]
    if not in_window:
        raise BenchError('flow-fleet: no run started in the window (%d in all)' % len(starts))
    if len(starts) >= backlog:
        raise BenchError('flow-fleet: the backlog of %d ran out before the window closed: the '
                         'workers took too long to start' % backlog)
    return len(in_window) / seconds


def wait_ready(reports: list[str], timeout: float) -> float:
    """When the last worker was serving (each writes its report's ready file)."""
    from bench.hooks import READY_SUFFIX
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(os.path.exists(path + READY_SUFFIX) for path in reports):
            return time.time()
        time.sleep(0.05)
    raise BenchError('flow-fleet: the workers were not serving within %gs' % timeout)


def read_starts(path: str) -> Iterator[float]:
    with contextlib.suppress(FileNotFoundError), open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                yield float(parts[1])


def figures(env: Environment, scenario: str, n: int, seconds: float,
            stores: Optional[Databases]) -> Figures:
    assert stores is not None
    if scenario == 'flow-fleet':
        return fleet_figures(env, seconds, stores)
    return limit_figures(env, n, scenario.split('-', 1)[1], stores)
