"""Tasks for the chaos run; each records what it did in $KALE_CHAOS_LOG.

One line per event, "<event> <task id> <pid> <time>", appended atomically by
every worker process.
"""
from __future__ import annotations

import os
import random
import signal
import time

from kale import task
from tests.support.records import append_line


def log(event: str, task_id: str) -> None:
    path = os.environ.get('KALE_CHAOS_LOG')
    if not path:
        return
    append_line(path, '%s %s %d %.3f' % (event, task_id, os.getpid(), time.time()))


def keyed_id(key):
    """The task id the chaos run chose (so a publish it retries after an
    error keeps its ids), or a random one."""
    from kale.ids import random_id
    return key or random_id()


class ChaosTask(task.Task):
    """``kind`` says how it behaves: 'ok' works; 'flaky' raises on its first
    attempt; 'slow' runs past its time limit on its first attempt. ``key``,
    when given, is the task id."""

    queue = 'chaos_default'
    time_limit = 1.0
    max_retries = 3

    @classmethod
    def make_task_id(cls, *args, key=None, **kwargs):
        return keyed_id(key)

    def run_task(self, kind: str = 'ok', *args, **kwargs):
        first = self.message is None or self.message.failure_num == 0
        if kind == 'flaky' and first:
            log('raised', self.task_id)
            raise ConnectionError('a service timed out')
        if kind == 'slow' and first:
            log('slow', self.task_id)
            deadline = time.monotonic() + 3 * self.time_limit
            while time.monotonic() < deadline:      # Python code a pool's thread can stop
                time.sleep(0.05)
        time.sleep(random.uniform(0, 0.02))
        log('done', self.task_id)


class ChaosHighTask(ChaosTask):
    queue = 'chaos_high'


class ChaosLowTask(ChaosTask):
    queue = 'chaos_low'


class ChaosFailingTask(task.Task):
    """Fails every time: after one retry it is dead-lettered by Kale."""

    queue = 'chaos_default'
    time_limit = 1.0
    max_retries = 1

    @classmethod
    def make_task_id(cls, *args, key=None, **kwargs):
        return keyed_id(key)

    def run_task(self, *args, **kwargs):
        log('raised', self.task_id)
        raise ValueError('this input can never be processed')


class ChaosKillerTask(task.Task):
    """Kills its own worker process every time it runs: SQS's redrive policy
    must move it to the dead-letter queue."""

    queue = 'chaos_default'
    time_limit = 1.0

    @classmethod
    def make_task_id(cls, *args, key=None, **kwargs):
        return keyed_id(key)

    def run_task(self, *args, **kwargs):
        log('killer', self.task_id)
        os.kill(os.getpid(), signal.SIGKILL)


class ChaosOrderedTask(task.Task):
    """On the FIFO queue: logs "ordered <task id> <pid> <time> <group> <seq>"
    when it starts and "done ..." when it ends; 'flaky' ones raise on their
    first attempt (the group waits for the retry)."""

    queue = 'chaos_ordered'
    time_limit = 1.0
    max_retries = 3

    @classmethod
    def make_task_id(cls, *args, key=None, **kwargs):
        return keyed_id(key)

    def run_task(self, group: str, seq: int, kind: str = 'ok', **kwargs):
        path = os.environ.get('KALE_CHAOS_LOG')
        if path:
            append_line(path, 'ordered %s %d %.3f %s %d' % (self.task_id, os.getpid(),
                                                           time.time(), group, seq))
        if kind == 'flaky' and (self.message is None or self.message.failure_num == 0):
            log('raised', self.task_id)
            raise ConnectionError('a service timed out')
        time.sleep(random.uniform(0, 0.02))
        log('done', self.task_id)


class ChaosRateTask(task.Task):
    """The rate-limit scenario's task: at most 10 starts a second across every
    worker (the records keep the bucket). Logs "rated <task id> <pid> <time>"
    when it starts; workers killed while they hold some, and runs refused
    earlier, bring copies back late."""

    queue = 'chaos_default'
    time_limit = 1.0
    max_retries = 3
    rate_limit = '10/s'

    @classmethod
    def make_task_id(cls, *args, key=None, **kwargs):
        return keyed_id(key)

    def run_task(self, kind: str = 'ok', **kwargs):
        log('rated', self.task_id)
        time.sleep(random.uniform(0, 0.02))
        log('done', self.task_id)


class ChaosLongTask(task.Task):
    """Runs 7-10 s on a queue whose visibility timeout is 6 s: the worker's
    heartbeat must keep its message invisible until it ends. Logs "long
    <task id> <pid> <time>" when it starts."""

    queue = 'chaos_default'
    time_limit = 15.0
    max_retries = 3

    @classmethod
    def make_task_id(cls, *args, key=None, **kwargs):
        return keyed_id(key)

    def run_task(self, kind: str = 'long', **kwargs):
        log('long', self.task_id)
        time.sleep(random.uniform(7, 10))
        log('done', self.task_id)


class ChaosStepTask(task.Task):
    """A step of the workflows scenario's chains and chords: awaits 0.5-2 s
    (so an asyncio worker holds many at once) and gives ``n``."""

    queue = 'chaos_default'
    time_limit = 3.0
    max_retries = 3

    async def run_task(self, n: int = 0, *inputs, **kwargs):
        import asyncio
        await asyncio.sleep(random.uniform(0.5, 2.0))
        log('done', self.task_id)
        return n


class ChaosJoinTask(task.Task):
    """The join of a chord in the workflows scenario: logs "join <task id> ..."
    each time it runs (a join runs once: its workflow publishes it once)."""

    queue = 'chaos_default'
    time_limit = 3.0
    max_retries = 3

    async def run_task(self, results, *more, **kwargs):
        log('join', self.task_id)
        log('done', self.task_id)
        return len(results) + len(more)
