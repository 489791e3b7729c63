"""The busy scenarios: publishing and draining. Each returns {figure: (kale,
baseline)} for one run (the idle ones are in bench/idle.py).

With the SQS transport the Kale worker is a `kale worker` process and the
baseline consumer a `python -m bench.raw` process; with the memory transport
both run in this process, against the same in-memory queues.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any, Callable, Iterator, Optional, TypeVar

from bench import tasks
from bench.environment import ROOT, Environment, Run, read_report
from bench.hooks import REPORT_VARIABLE
from bench.raw import drain_loop
from kale import codec as kale_codec
from kale import message as kale_message
from kale.conf import settings
from kale.worker import Worker

NOOP_TASKS = [tasks.NoopHighTask, tasks.NoopTask, tasks.NoopLowTask]
#: The no-op tasks of the asyncio pool: coroutines, run on its event loop.
NOOP_ASYNC_TASKS = [tasks.NoopAsyncHighTask, tasks.NoopAsyncTask, tasks.NoopAsyncLowTask]
WAVE = 100          # moto slows down as a queue grows: publish at most this many at a time

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


def sample_body(run: Run) -> str:
    """A message like Kale's, for the baseline to send: the same body size, and
    (set on the raw sender) the same attributes, so both consumers receive
    identical messages (some emulators return every attribute, asked or not)."""
    outgoing = kale_codec.to_outgoing(
        kale_message.Message('0' * 32, tasks.NoopTask.task_path(), (0,)), 'bench-bench_default')
    run.raw.attributes = dict(outgoing.attributes)
    return outgoing.body


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return int(probe.getsockname()[1])


def split(n: int, parts: int = 3) -> list[int]:
    return [n // parts + (1 if index < n % parts else 0) for index in range(parts)]


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


def kale_publish_wave(batch: bool) -> Callable[[int], Any]:
    """Publishes ``count`` no-op tasks, one by one or with publish_batch."""
    if batch:
        return lambda count: tasks.NoopTask.publish_batch(None, [((i,), {}) for i in range(count)])
    return lambda count: [tasks.NoopTask.publish(None, i) for i in range(count)]


def publish_rates(env: Environment, n: int) -> Figures:
    """Publish one by one and publish_batch, beside raw send_message(_batch)."""
    run = env.new_run()
    name = run.broker.sqs_name(run.queues[1])
    body = sample_body(run)

    def raw_single(count: int) -> None:
        with counting_raw(run):
            for _ in range(count):
                run.raw.send(name, body)

    def raw_batch(count: int) -> None:
        with counting_raw(run):
            run.raw.send_batch(name, [body] * count)

    kale_single = _timed_waves(run, n, kale_publish_wave(batch=False))
    baseline_single = _timed_waves(run, n, raw_single)
    kale_batch = _timed_waves(run, n, kale_publish_wave(batch=True))
    baseline_batch = _timed_waves(run, n, raw_batch)
    run.close()
    return {'publish one by one (tasks/s)': (n / kale_single, n / baseline_single),
            'publish_batch (tasks/s)': (n / kale_batch, n / baseline_batch),
            'publish_batch speed-up over one by one (x)': (kale_single / kale_batch,
                                                           baseline_single / baseline_batch)}


# --- 2, 3, 6, 7. draining, requests per task, memory, CPU ----------------------------------

def kale_pipeline(env: Environment, n: int, batch: bool, metrics: bool = False,
                  records_url: str = '', pool: str = 'serial', root: str = ROOT,
                  noop_tasks: Optional[list[type]] = None, rate_limit_url: str = ''
                  ) -> dict[str, Any]:
    """Publish n no-op tasks over three queues with Kale; one worker drains them
    (with ``metrics``, a worker serving Prometheus metrics on a free port; with
    task records on ``records_url``, when given; its tasks run in ``pool``; the
    worker from the checkout at ``root``; ``noop_tasks``, one class per queue,
    instead of the plain no-ops; flow control's store on ``rate_limit_url``)."""
    run = env.new_run(records_url=records_url, rate_limit_url=rate_limit_url)
    noop_tasks = noop_tasks or (NOOP_ASYNC_TASKS if pool == 'asyncio' else NOOP_TASKS)
    for task_class, count in zip(noop_tasks, split(n), strict=False):
        if batch:
            task_class.publish_batch(None, [((i,), {}) for i in range(count)])
        else:
            for i in range(count):
                task_class.publish(None, i)
    published = run.counter.total
    if records_url:
        # The publisher's own records are the publish figure's cost: written
        # before the worker starts, they do not compete with the drain.
        from kale.app import default_app
        default_app().recorder.flush(60)
    path = env.report_path()
    port = free_port() if metrics else 0
    if env.memory:
        with settings.override(METRICS_PORT=port):
            worker = Worker(queue_names=[q.name for q in run.queues], burst=True,
                            broker=run.broker, pool=pool)
        with environment_variable(REPORT_VARIABLE, path):
            worker.run()
        report = read_report(path)
        report['late_settles'] = run.transport.late_settles
        worker_requests = run.counter.total - published
    else:
        options = ['--pool', pool] if pool != 'serial' else []    # an older checkout has none
        env.start_worker('--burst', '--metrics-port', str(port), *options, root=root,
                         **{REPORT_VARIABLE: path}).wait(600)
        report = read_report(path)
        worker_requests = len(report['requests'])
    run.close()
    return _rates(report, published + worker_requests, n)


def raw_pipeline(env: Environment, n: int, batch: bool) -> dict[str, Any]:
    """The baseline: raw sends, then a raw receive(10) + delete_message_batch loop."""
    run = env.new_run()
    body = sample_body(run)
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
    return _rates(report, published + consumer_requests, n)


def _rates(report: dict[str, Any], requests: int, n: int) -> dict[str, Any]:
    """Per-task figures of a consumer's report."""
    report['requests_per_task'] = requests / n
    report['rate'] = report['tasks'] / max(report['last_run'] - report['started'], 1e-9)
    report['cpu_us_per_task'] = report['cpu_sec'] * 1e6 / max(report['tasks'], 1)
    return report


def drain_and_requests(env: Environment, n: int) -> Figures:
    """Worker drain rate and CPU per task, requests per task (batch and single
    publishing), memory."""
    kale_batch, raw_batch = kale_pipeline(env, n, True), raw_pipeline(env, n, True)
    kale_single, raw_single = kale_pipeline(env, n, False), raw_pipeline(env, n, False)
    figures: Figures = {
        'worker drain (tasks/s)': (kale_batch['rate'], raw_batch['rate']),
        'worker CPU per task (µs)': (kale_batch['cpu_us_per_task'], raw_batch['cpu_us_per_task']),
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


T = TypeVar('T')


def alternating(flag: list[bool], first: Callable[[], T], second: Callable[[], T]
                ) -> tuple[T, T]:
    """Both runs, in the other order than the last time ``flag`` was
    flipped, so that neither always runs on a warmer process or endpoint;
    their results in the order given."""
    flag[0] = not flag[0]
    if flag[0]:
        a = first()
        return a, second()
    b = second()
    return first(), b


# --- the cost of metrics --------------------------------------------------------------------

METRICS_DRAIN = 'worker drain, metrics on (tasks/s; baseline: metrics off)'
METRICS_CPU = 'worker CPU per task, metrics on (µs; baseline: metrics off)'
_metrics_first = [False]


def drain_with_metrics(env: Environment, n: int) -> Figures:
    """The same drain with and without ``--metrics-port``, in alternating order
    from one run to the next (so neither always runs on a warmer process or
    endpoint); the "baseline" of these figures is the worker without metrics."""
    on, off = alternating(_metrics_first, lambda: kale_pipeline(env, n, True, metrics=True),
                          lambda: kale_pipeline(env, n, True))
    return {METRICS_DRAIN: (on['rate'], off['rate']),
            METRICS_CPU: (on['cpu_us_per_task'], off['cpu_us_per_task'])}


# --- this checkout beside another ----------------------------------------------------------

VERSUS_DRAIN = 'worker drain (tasks/s; baseline: the --versus checkout)'
VERSUS_CPU = 'worker CPU per task (µs; baseline: the --versus checkout)'
_versus_first = [False]


def drain_versus(env: Environment, n: int, other_root: str) -> Figures:
    """The serial drain of this checkout beside that of another (an earlier
    commit's worktree), in alternating order from run to run."""
    this, other = alternating(_versus_first, lambda: kale_pipeline(env, n, True),
                              lambda: kale_pipeline(env, n, True, root=other_root))
    return {VERSUS_DRAIN: (this['rate'], other['rate']),
            VERSUS_CPU: (this['cpu_us_per_task'], other['cpu_us_per_task'])}
