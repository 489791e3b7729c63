"""Task records on beside records off: the `publish-records` and
`drain-records` scenarios (`python -m bench --records`).

The same Kale publish and drain as `publish` and `drain`, on the same
endpoint in the same run, once with ``RECORDS_URL = ''`` and once with a
SQLite file of its own in the run's scratch directory (WAL, as
``kale.presets.local`` ships it). Here the baseline is Kale with records off,
not boto3: issue 12 asks drain >= 0.9x and publish >= 0.85x of it.

Publishing is timed from the first task to the last, in waves of 100 that
follow each other without the untimed drains of `publish` (in which the
records writer could work for free), and with records on until the writer
has written every task's record. The drain is
timed as in `drain`, from the worker's start to its last task run, on both
sides; how long after that the last records were written is a figure of its
own (the writer lets rows gather for up to 0.1 s), and the records of every
task must be there once the worker has exited, which is checked. CPU per
task runs to the worker's exit, after its records are written, on both
sides.
"""
from __future__ import annotations

import itertools
import os
import time
import uuid
from typing import Any, Callable

from bench.environment import Environment
from bench.scenarios import WAVE, Figures, counting_raw, kale_pipeline, kale_publish_wave
from bench.servers import BenchError

PUBLISH_SINGLE = 'records on/off: publish one by one (tasks/s)'
PUBLISH_BATCH = 'records on/off: publish_batch (tasks/s)'
DRAIN = 'records on/off: worker drain (tasks/s)'
CPU = 'records on/off: worker CPU per task (µs)'
RECORDED = 'records on: drained tasks recorded succeeded (%)'
LAG = 'records on: last record written after the last task (ms)'
#: Seconds to wait for a writer to write what it holds.
FLUSH_TIMEOUT_SEC = 60.0

#: Which side runs first alternates from one run to the next, so neither is
#: always the one that warms the endpoint up.
_turn = itertools.count()


def new_records_url(env: Environment) -> str:
    """A fresh SQLite file in the run's scratch directory."""
    return 'sqlite:///%s' % os.path.join(env.workdir, 'records-%s.db' % uuid.uuid4().hex[:8])


def both(off: Callable[[], Any], on: Callable[[], Any]) -> tuple[Any, Any]:
    """(on's result, off's result), run in alternating order."""
    if next(_turn) % 2:
        with_records = on()
        return with_records, off()
    without = off()
    return on(), without


def flush_records(url: str) -> None:
    from kale.app import default_app
    if not default_app().recorder.flush(FLUSH_TIMEOUT_SEC):
        raise BenchError('task records on %s were not written within %gs' % (url, FLUSH_TIMEOUT_SEC))


def forget_records() -> None:
    """Stop this process's records writers (each run has a store of its own)."""
    from kale.records.recorder import reset_recorders
    reset_recorders()


def publish_seconds(env: Environment, n: int, batch: bool, records_url: str) -> float:
    """Seconds to publish n tasks and, with records on, to write their records."""
    run = env.new_run(records_url=records_url)
    if records_url:     # a publisher's store exists before it publishes: not timed
        from kale import records
        records.store().migrate()
    publish_wave = kale_publish_wave(batch)
    try:
        started = time.perf_counter()
        for done in range(0, n, WAVE):
            publish_wave(min(WAVE, n - done))
        if records_url:
            flush_records(records_url)
        spent = time.perf_counter() - started
        with counting_raw(run):
            run.raw.drain(run.broker.sqs_name(run.queues[1]))
        return spent
    finally:
        run.close()
        forget_records()


def publish_rates(env: Environment, n: int) -> Figures:
    """Publishing one by one and with publish_batch, records on beside off."""
    figures: Figures = {}
    for figure, batch in ((PUBLISH_SINGLE, False), (PUBLISH_BATCH, True)):
        on, off = both(lambda batch=batch: publish_seconds(env, n, batch, ''),
                       lambda batch=batch: publish_seconds(env, n, batch, new_records_url(env)))
        figures[figure] = (n / on, n / off)
    return figures


def count_succeeded(url: str) -> int:
    from kale import records
    from kale.records.queries import TaskFilter
    return records.queries().count(TaskFilter(statuses=('succeeded',)))


def drain_with_records(env: Environment, n: int) -> dict[str, Any]:
    url = new_records_url(env)
    try:
        report = kale_pipeline(env, n, True, records_url=url)
        flush_records(url)          # the memory transport's worker ran in this process
        report['recorded'] = count_succeeded(url)
    finally:
        forget_records()
    return report


def cpu_us_to_exit(report: dict[str, Any]) -> float:
    """CPU per task up to the worker's exit, once its records were written
    (both sides include the idle polls that end a burst)."""
    return report['cpu_sec_to_exit'] * 1e6 / max(report['tasks'], 1)


def drain_rates(env: Environment, n: int) -> Figures:
    """A worker's drain rate and CPU per task, records on beside off."""
    on, off = both(lambda: kale_pipeline(env, n, True), lambda: drain_with_records(env, n))
    return {DRAIN: (on['rate'], off['rate']),
            CPU: (cpu_us_to_exit(on), cpu_us_to_exit(off)),
            RECORDED: (100.0 * on['recorded'] / n, None),
            LAG: (1000.0 * max(on['records_written_at'] - on['last_run'], 0.0), None)}
