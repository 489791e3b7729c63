"""The benchmark scenarios. Each returns {figure: (kale, baseline)} for one run.

With the SQS transport the Kale worker is a `kale worker` process and the
baseline consumer a `python -m bench.raw` process; with the memory transport
both run in this process, against the same in-memory queues.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Iterator, Optional

from bench import tasks
from bench.environment import ROOT, Environment, Run, read_report
from bench.hooks import REPORT_VARIABLE
from bench.raw import IdlePollers, drain_loop
from kale import codec as kale_codec
from kale import message as kale_message
from kale.worker import Worker

NOOP_TASKS = [tasks.NoopHighTask, tasks.NoopTask, tasks.NoopLowTask]
LATENCY_TASKS = [tasks.LatencyHighTask, tasks.LatencyTask, tasks.LatencyLowTask]
WAVE = 100          # moto slows down as a queue grows: publish at most this many at a time
IDLE_WARM_UP_SEC = 3.0

Figures = dict[str, tuple[Optional[float], Optional[float]]]


@contextlib.contextmanager
def environment_variable(name: str, value: str) -> Iterator[None]:
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


@contextlib.contextmanager
def counting_raw(run: Run) -> Iterator[None]:
    """With the memory transport, attribute requests to the baseline for a block."""
    run.counting_raw = True
    try:
        yield
    finally:
        run.counting_raw = False


def sample_body() -> str:
    """A body the size of Kale's, for the baseline to send."""
    return kale_codec.encode(kale_message.Message('0' * 32, tasks.NoopTask.task_path(), (0,)))


def split(n: int, parts: int = 3) -> list[int]:
    return [n // parts + (1 if index < n % parts else 0) for index in range(parts)]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


# --- 1. publishing ------------------------------------------------------------------

def _timed_waves(run: Run, total: int, publish_wave: Callable[[int], Any]) -> float:
    """Seconds spent in ``publish_wave(count)``, in waves drained in between."""
    spent, done = 0.0, 0
    name = run.broker.sqs_name(run.queues[1])
    while done < total:
        count = min(WAVE, total - done)
        started = time.perf_counter()
        publish_wave(count)
        spent += time.perf_counter() - started
        done += count
        with counting_raw(run):
            run.raw.drain(name)
    return spent


def publish_rates(env: Environment, n: int) -> Figures:
    """Publish one by one and publish_batch, beside raw send_message(_batch)."""
    run = env.new_run()
    name = run.broker.sqs_name(run.queues[1])
    body = sample_body()

    def raw_single(count: int) -> None:
        with counting_raw(run):
            for _ in range(count):
                run.raw.send(name, body)

    def raw_batch(count: int) -> None:
        with counting_raw(run):
            run.raw.send_batch(name, [body] * count)

    kale_single = _timed_waves(run, n, lambda count: [tasks.NoopTask.publish(None, i)
                                                      for i in range(count)])
    baseline_single = _timed_waves(run, n, raw_single)
    kale_batch = _timed_waves(run, n, lambda count: tasks.NoopTask.publish_batch(
        None, [((i,), {}) for i in range(count)]))
    baseline_batch = _timed_waves(run, n, raw_batch)
    run.close()
    return {'publish one by one (tasks/s)': (n / kale_single, n / baseline_single),
            'publish_batch (tasks/s)': (n / kale_batch, n / baseline_batch),
            'publish_batch speed-up over one by one (x)': (kale_single / kale_batch,
                                                           baseline_single / baseline_batch)}


# --- 2, 3, 6. draining, requests per task, memory ------------------------------------------

def kale_pipeline(env: Environment, n: int, batch: bool) -> dict[str, Any]:
    """Publish n no-op tasks over three queues with Kale; one worker drains them."""
    run = env.new_run()
    for task_class, count in zip(NOOP_TASKS, split(n), strict=False):
        if batch:
            task_class.publish_batch(None, [((i,), {}) for i in range(count)])
        else:
            for i in range(count):
                task_class.publish(None, i)
    published = run.counter.total
    path = env.report_path()
    if env.memory:
        worker = Worker(queue_names=[q.name for q in run.queues], burst=True, broker=run.broker)
        with environment_variable(REPORT_VARIABLE, path):
            worker.run()
        report = read_report(path)
        report['late_settles'] = run.transport.late_settles
        worker_requests = run.counter.total - published
    else:
        env.start_worker('--burst', **{REPORT_VARIABLE: path}).wait(600)
        report = read_report(path)
        worker_requests = len(report['requests'])
    run.close()
    report['requests_per_task'] = (published + worker_requests) / n
    report['rate'] = report['tasks'] / max(report['last_run'] - report['started'], 1e-9)
    return report


def raw_pipeline(env: Environment, n: int, batch: bool) -> dict[str, Any]:
    """The baseline: raw sends, then a raw receive(10) + delete_message_batch loop."""
    run = env.new_run()
    body = sample_body()
    with counting_raw(run):
        for name, count in zip(run.sqs_names(), split(n), strict=False):
            if batch:
                run.raw.send_batch(name, [body] * count)
            else:
                for _ in range(count):
                    run.raw.send(name, body)
        published = run.raw_counter.total
        if env.memory:
            report: dict[str, Any] = dict(drain_loop(run.raw, run.sqs_names(), n))
            consumer_requests = run.raw_counter.total - published
            report['peak_rss_mb'] = None
        else:
            output = subprocess.run(
                [sys.executable, '-m', 'bench.raw', '--endpoint', env.endpoint,
                 '--queues', ','.join(run.sqs_names()), '--expect', str(n),
                 '--access-key', 'bench', '--secret-key', 'bench'],
                cwd=ROOT, env=env.worker_env(), capture_output=True, text=True, timeout=600,
                check=True)
            report = json.loads(output.stdout)
            consumer_requests = len(report['requests'])
    run.close()
    report['requests_per_task'] = (published + consumer_requests) / n
    report['rate'] = report['tasks'] / max(report['last_run'] - report['started'], 1e-9)
    return report


def drain_and_requests(env: Environment, n: int) -> Figures:
    """Worker drain rate, requests per task (batch and single publishing), memory."""
    kale_batch, raw_batch = kale_pipeline(env, n, True), raw_pipeline(env, n, True)
    kale_single, raw_single = kale_pipeline(env, n, False), raw_pipeline(env, n, False)
    figures: Figures = {
        'worker drain (tasks/s)': (kale_batch['rate'], raw_batch['rate']),
        'requests per task, publish_batch': (kale_batch['requests_per_task'],
                                             raw_batch['requests_per_task']),
        'requests per task, publish one by one': (kale_single['requests_per_task'],
                                                  raw_single['requests_per_task']),
    }
    if env.memory:
        figures['messages settled past their budget'] = (
            float(kale_batch['late_settles'] + kale_single['late_settles']), None)
    else:
        figures['worker peak memory (MB)'] = (kale_batch['peak_rss_mb'], raw_batch['peak_rss_mb'])
    return figures


# --- 4, 5. an idle worker: latency and cost ---------------------------------------------

@contextlib.contextmanager
def worker_process(env: Environment, report_path: str, latency_file: str = '') -> Iterator[None]:
    """A `kale worker` process serving the run's queues, gone idle by the time
    the block starts; stopped with SIGTERM at its end."""
    process = env.start_worker(**{REPORT_VARIABLE: report_path,
                                  'KALE_BENCH_LATENCY_FILE': latency_file})
    try:
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


def _kale_latencies(env: Environment, run: Run, samples: int, latency_file: str) -> list[float]:
    rng = random.Random(5)
    latencies = []
    for _ in range(samples):
        task_class = rng.choice(LATENCY_TASKS)
        sent = time.time()
        task_id = task_class.publish(None)
        started = _wait_for_start(task_id, latency_file)
        latencies.append(started - sent)
        time.sleep(rng.uniform(0.05, 0.15))
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


def _raw_latencies(run: Run, samples: int) -> list[float]:
    rng = random.Random(5)
    arrived: dict[str, float] = {}
    names = run.sqs_names()
    with counting_raw(run):
        pollers = IdlePollers(run.raw, names, 20,
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
            time.sleep(rng.uniform(0.05, 0.15))
        pollers.stop()
    return latencies


def latency(env: Environment, samples: int) -> Figures:
    """Publish-to-start latency with an idle worker already long-polling (20 s)."""
    run = env.new_run(long_poll_sec=20)
    latency_file = os.path.join(env.workdir, 'latency-%s.txt' % run.prefix)
    report = env.report_path()
    if env.memory:
        kale = run_with_memory_worker(run, report,
                                      lambda: _kale_latencies(env, run, samples, ''))
    else:
        with worker_process(env, report, latency_file):
            kale = _kale_latencies(env, run, samples, latency_file)
    run.close()
    # Fresh queues for the baseline: a long poll of the stopped worker can still
    # be waiting on the server and would take the baseline's first message.
    raw_run = env.new_run(long_poll_sec=20)
    raw = _raw_latencies(raw_run, samples)
    raw_run.close()
    return {'publish-to-start latency p50 (ms)': (percentile(kale, 0.5) * 1000,
                                                  percentile(raw, 0.5) * 1000),
            'publish-to-start latency p99 (ms)': (percentile(kale, 0.99) * 1000,
                                                  percentile(raw, 0.99) * 1000)}


def idle_cost(env: Environment, window_sec: float) -> Figures:
    """Requests per minute of a worker whose three queues are empty (20 s long
    polls), beside three raw long-polling threads on queues of their own,
    measured over the same window."""
    run, raw_run = env.new_run(long_poll_sec=20), env.new_run(long_poll_sec=20)
    path = env.report_path()
    window: dict[str, float] = {}

    def measure() -> None:
        window['start'] = time.time()
        time.sleep(window_sec)
        window['end'] = time.time()

    with counting_raw(raw_run):
        pollers = IdlePollers(raw_run.raw, raw_run.sqs_names(), 20).start()
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
    return {'idle requests per minute, 3 empty queues': (kale_requests * per_minute,
                                                          raw_requests * per_minute)}
