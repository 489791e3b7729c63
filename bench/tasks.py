"""Tasks the benchmarks publish."""
from __future__ import annotations

import asyncio
import os
import time

from kale import task
from tests.support.records import append_line

#: time.time() when the last NoopTask ran in this process.
LAST_RUN_AT = [0.0]
#: time.process_time() (CPU of every thread of this process) at that moment.
LAST_RUN_CPU = [0.0]
#: task id -> time.time() when each LatencyTask started in this process.
STARTED_AT: dict[str, float] = {}


def ran() -> None:
    """Note the time and the process's CPU of the run that just ended."""
    LAST_RUN_AT[0] = time.time()
    LAST_RUN_CPU[0] = time.process_time()


class NoopTask(task.Task):
    """Does nothing: the framework's cost is all that is measured."""

    queue = 'bench_default'
    time_limit = 10

    def run_task(self, *args, **kwargs):
        # ran(), inline: the no-op the baseline checkout's worker runs is the same
        LAST_RUN_AT[0] = time.time()
        LAST_RUN_CPU[0] = time.process_time()


class NoopHighTask(NoopTask):
    queue = 'bench_high'


class NoopLowTask(NoopTask):
    queue = 'bench_low'


class LatencyTask(task.Task):
    """Records when it started, in this process and in $KALE_BENCH_LATENCY_FILE."""

    queue = 'bench_default'
    time_limit = 10

    def run_task(self, *args, **kwargs):
        now = time.time()
        STARTED_AT[self.task_id] = now
        path = os.environ.get('KALE_BENCH_LATENCY_FILE')
        if path:
            append_line(path, '%s %.6f' % (self.task_id, now))


class LatencyHighTask(LatencyTask):
    queue = 'bench_high'


class LatencyLowTask(LatencyTask):
    queue = 'bench_low'


class IoAsyncTask(task.Task):
    """Waits ``seconds`` the asyncio way, as a call to another service would."""

    queue = 'bench_default'
    time_limit = 10

    async def run_task(self, seconds=0.1):
        await asyncio.sleep(seconds)
        ran()


class IoSleepTask(task.Task):
    """Waits ``seconds`` in a blocking call, as a blocking HTTP client would."""

    queue = 'bench_default'
    time_limit = 10

    def run_task(self, seconds=0.1):
        time.sleep(seconds)
        ran()


class NoopAsyncTask(task.Task):
    """NoopTask as a coroutine: what the asyncio pool runs on its event loop."""

    queue = 'bench_default'
    time_limit = 10

    async def run_task(self, *args, **kwargs):
        ran()


class NoopAsyncHighTask(NoopAsyncTask):
    queue = 'bench_high'


class NoopAsyncLowTask(NoopAsyncTask):
    queue = 'bench_low'


#: Far above any rate a benchmark reaches: a token is always there, and what
#: is measured is the asking.
UNREACHED_RATE = '1000000/s'


class RatedNoopTask(NoopTask):
    """NoopTask under a rate limit it never reaches."""

    rate_limit = UNREACHED_RATE


class RatedNoopHighTask(RatedNoopTask):
    queue = 'bench_high'


class RatedNoopLowTask(RatedNoopTask):
    queue = 'bench_low'


class SlottedNoopTask(NoopTask):
    """NoopTask under a concurrency limit it never reaches."""

    concurrency_limit = 1000000


class SlottedNoopHighTask(SlottedNoopTask):
    queue = 'bench_high'


class SlottedNoopLowTask(SlottedNoopTask):
    queue = 'bench_low'


class FleetRatedTask(NoopTask):
    """Shared by a fleet of workers at 20 a second (bench/flow.py's flow-fleet);
    each run appends when it started to $KALE_BENCH_LATENCY_FILE. Each run of
    the benchmark has a bucket of its own (its queue prefix is the key), so a
    database given with --flow-url carries no reservation from one to the next."""

    rate_limit = '20/s'

    def rate_limit_key(self, *args, **kwargs):
        return os.environ.get('KALE_BENCH_PREFIX', '')

    def run_task(self, *args, **kwargs):
        path = os.environ.get('KALE_BENCH_LATENCY_FILE')
        if path:
            append_line(path, '%s %.6f' % (self.task_id, time.time()))
        ran()


class FleetTask(NoopAsyncTask):
    """A fleet benchmark's chord member (bench/fleet_scale.py): a coroutine
    no-op under a rate limit the fleet never reaches, one bucket for every
    worker (a row they all ask)."""

    rate_limit = UNREACHED_RATE


class FleetSlottedTask(NoopAsyncTask):
    """FleetTask under a concurrency limit instead (``--fleet-limit concurrency``)."""

    concurrency_limit = 1000000


class FleetCollect(task.Task):
    """A fleet benchmark's chord callback: how many results it was given."""

    queue = 'bench_default'
    time_limit = 30

    async def run_task(self, values, *more):
        return len(values)
