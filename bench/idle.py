"""The idle scenarios: publish-to-start latency and the requests of an idle
worker, each for one set of long polls. Each returns {figure: (kale, baseline)}
for one run.

Two sets of long polls are measured (see bench/environment.py): ``equal``,
20 s on each of the three queues, and ``shipped``, those of the shipped
queue_config.yaml (1, 1 and 5 s). The baseline is one raw thread per queue,
each long-polling its own queue for that queue's long poll, so its idle cost
is what the long polls imply (60 / long poll per queue and minute).
"""
from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from typing import Any, Callable, Iterator

from bench import tasks
from bench.environment import Environment, LongPolls, Run, read_report
from bench.hooks import READY_SUFFIX, REPORT_VARIABLE
from bench.raw import IdlePollers
from bench.scenarios import Figures, counting_raw, environment_variable
from kale.worker import Worker

LATENCY_TASKS = [tasks.LatencyHighTask, tasks.LatencyTask, tasks.LatencyLowTask]
IDLE_WARM_UP_SEC = 3.0
#: How long a worker process may take to start (a loaded machine is slow to import).
WORKER_START_SEC = 60.0
#: Pauses between latency samples cover the worker's idle cycle (the longest
#: long poll) when it is at most this long ...
FULL_CYCLE_MAX_SEC = 5.0
#: ... else they are this short, as covering 20 s would take minutes a run.
SHORT_PAUSE_SEC = (0.05, 0.15)


def pause_range(long_polls: LongPolls) -> tuple[float, float]:
    """Seconds to wait after a sample started before publishing the next one,
    drawn uniformly from this range, so that samples land at random moments of
    the idle worker's cycle of long polls (where a queue's poll may have ended
    before another's)."""
    cycle = max(long_polls)
    return (SHORT_PAUSE_SEC[0], cycle) if SHORT_PAUSE_SEC[1] < cycle <= FULL_CYCLE_MAX_SEC \
        else SHORT_PAUSE_SEC


def latency_figures(label: str) -> tuple[str, str]:
    """The names of the p50 and p99 figures for a set of long polls."""
    name = 'publish-to-start latency %s (ms), %s long polls'
    return name % ('p50', label), name % ('p99', label)


def idle_figure(label: str) -> str:
    return 'idle requests per minute, %s long polls' % label


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


@contextlib.contextmanager
def worker_process(env: Environment, report_path: str, latency_file: str = '') -> Iterator[None]:
    """A `kale worker` process serving the run's queues, gone idle by the time
    the block starts; stopped with SIGTERM at its end."""
    process = env.start_worker(**{REPORT_VARIABLE: report_path,
                                  'KALE_BENCH_LATENCY_FILE': latency_file})
    try:
        started_by = time.monotonic() + WORKER_START_SEC
        while not os.path.exists(report_path + READY_SUFFIX):
            if process.poll() is not None or time.monotonic() > started_by:
                raise RuntimeError('bench: the worker did not start (exit code %s)'
                                   % process.poll())
            time.sleep(0.05)
        time.sleep(IDLE_WARM_UP_SEC)
        yield
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


def run_with_memory_worker(run: Run, report_path: str, body: Callable[[], Any]) -> Any:
    """Run ``body`` on a thread while an in-process worker serves the queues."""
    worker = Worker(queue_names=[q.name for q in run.queues], broker=run.broker)
    outcome: dict[str, Any] = {}

    def drive() -> None:
        try:
            time.sleep(IDLE_WARM_UP_SEC)
            outcome['value'] = body()
        except BaseException as exc:   # report it on the main thread
            outcome['error'] = exc
        finally:
            worker.stop()

    thread = threading.Thread(target=drive, daemon=True)
    with environment_variable(REPORT_VARIABLE, report_path):
        thread.start()
        worker.run()
    thread.join()
    if 'error' in outcome:
        raise outcome['error']
    return outcome.get('value')


# --- publish-to-start latency --------------------------------------------------------

def _kale_latencies(run: Run, samples: int, latency_file: str,
                    pauses: tuple[float, float]) -> list[float]:
    rng = random.Random(5)
    latencies = []
    for _ in range(samples):
        task_class = rng.choice(LATENCY_TASKS)
        sent = time.time()
        task_id = task_class.publish(None)
        started = _wait_for_start(task_id, latency_file)
        latencies.append(started - sent)
        time.sleep(rng.uniform(*pauses))
    return latencies


def _wait_for_start(task_id: str, latency_file: str, timeout: float = 60) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if task_id in tasks.STARTED_AT:
            return tasks.STARTED_AT[task_id]
        if latency_file and os.path.exists(latency_file):
            with open(latency_file) as f:
                for line in f:
                    found, at = line.split()
                    if found == task_id:
                        return float(at)
        time.sleep(0.001)
    raise RuntimeError('task %s did not start within %ss' % (task_id, timeout))


def _raw_latencies(run: Run, samples: int, long_polls: LongPolls) -> list[float]:
    rng = random.Random(5)
    arrived: dict[str, float] = {}
    names = run.sqs_names()
    with counting_raw(run):
        pollers = IdlePollers(run.raw, names, long_polls,
                              on_message=lambda body, at: arrived.setdefault(body, at)).start()
        time.sleep(1.0)
        latencies = []
        for index in range(samples):
            body = 'latency-%d' % index
            sent = time.time()
            run.raw.send(rng.choice(names), body)
            deadline = time.monotonic() + 60
            while body not in arrived and time.monotonic() < deadline:
                time.sleep(0.001)
            latencies.append(arrived[body] - sent)
            time.sleep(rng.uniform(*pause_range(long_polls)))
        pollers.stop()
    return latencies


def latency(env: Environment, samples: int, long_polls: LongPolls, label: str) -> Figures:
    """Publish-to-start latency with an idle worker already long-polling."""
    run = env.new_run(long_polls)
    latency_file = os.path.join(env.workdir, 'latency-%s.txt' % run.prefix)
    report = env.report_path()
    pauses = pause_range(long_polls)
    if env.memory:
        kale = run_with_memory_worker(run, report,
                                      lambda: _kale_latencies(run, samples, '', pauses))
    else:
        with worker_process(env, report, latency_file):
            kale = _kale_latencies(run, samples, latency_file, pauses)
    run.close()
    # Fresh queues for the baseline: a long poll of the stopped worker can still
    # be waiting on the server and would take the baseline's first message.
    raw_run = env.new_run(long_polls)
    raw = _raw_latencies(raw_run, samples, long_polls)
    raw_run.close()
    p50, p99 = latency_figures(label)
    return {p50: (percentile(kale, 0.5) * 1000, percentile(raw, 0.5) * 1000),
            p99: (percentile(kale, 0.99) * 1000, percentile(raw, 0.99) * 1000)}


# --- idle cost -------------------------------------------------------------------------

def idle_cost(env: Environment, window_sec: float, long_polls: LongPolls, label: str) -> Figures:
    """Requests per minute of a worker whose three queues are empty, beside
    three raw long-polling threads on queues of their own, measured over the
    same window."""
    run, raw_run = env.new_run(long_polls), env.new_run(long_polls)
    path = env.report_path()
    window: dict[str, float] = {}

    def measure() -> None:
        window['start'] = time.time()
        time.sleep(window_sec)
        window['end'] = time.time()

    with counting_raw(raw_run):
        pollers = IdlePollers(raw_run.raw, raw_run.sqs_names(), long_polls).start()
        if env.memory:
            run_with_memory_worker(run, path, measure)
            kale_requests = run.counter.between(window['start'], window['end'])
        else:
            with worker_process(env, path):
                measure()
            events = read_report(path)['requests']
            kale_requests = sum(1 for at, _ in events if window['start'] <= at <= window['end'])
        raw_requests = raw_run.raw_counter.between(window['start'], window['end'])
        pollers.stop()
    raw_run.close()
    run.close()
    per_minute = 60.0 / window_sec
    return {idle_figure(label): (kale_requests * per_minute, raw_requests * per_minute)}
