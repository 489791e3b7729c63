"""Example tasks: one of each behaviour a task queue has to handle."""
import asyncio
import json
import os
import time
import urllib.parse

from kale import Retry, settings, task


def record(task_inst, outcome, **details):
    """Append what happened to EXAMPLE_RESULTS_FILE, when one is set."""
    path = getattr(settings, 'EXAMPLE_RESULTS_FILE', '')
    if path:
        line = dict(task=type(task_inst).__name__, id=task_inst.task_id, outcome=outcome, **details)
        with open(path, 'a') as f:
            f.write(json.dumps(line) + '\n')


class FibonacciTask(task.Task):
    """Computes a Fibonacci number, on the high-priority queue."""

    queue = 'high_priority'
    time_limit = 5
    max_retries = 2

    def run_task(self, n, *args, **kwargs):
        a, b = 0, 1
        for _ in range(n):
            a, b = b, a + b
        record(self, 'done', n=n, result=a)
        return a


class FlakyTask(task.Task):
    """Fails on its first attempt and succeeds when retried: half the orders
    meet a timeout talking to the payment service (retried after the class's
    back-off), the other half its "429 Too Many Requests, Retry-After: 1",
    which the task honours by choosing its own retry delay."""

    queue = 'default'
    time_limit = 5
    max_retries = 3

    def run_task(self, order_id, *args, **kwargs):
        if self.message is not None and self.message.failure_num == 0:
            record(self, 'failed_once', order_id=order_id)
            if int(order_id.rsplit('-', 1)[-1]) % 2:
                raise Retry(after=1, exc=RuntimeError('payment service: 429 for order %s'
                                                      % order_id))
            raise ConnectionError('payment service timed out for order %s' % order_id)
        record(self, 'done', order_id=order_id)


class FetchPageTask(task.Task):
    """An I/O-bound coroutine: ``async def run_task`` runs on the worker's
    event loop, and on ``--pool asyncio`` a worker runs many at once while
    each waits (here 0.2 s stands in for an HTTP call, e.g. with httpx's
    AsyncClient).

    Flow control: at most 20 fetches a second across every worker (a token
    bucket in the task records), and on the fair queue ``default`` each site
    is a tenant of its own, so one site's backlog does not hold up the
    others' pages."""

    queue = 'default'
    time_limit = 5
    rate_limit = '20/s'

    def fair_key(self, page, *args, **kwargs):
        return urllib.parse.urlsplit(page).hostname

    async def run_task(self, page, *args, **kwargs):
        await asyncio.sleep(0.2)
        record(self, 'done', page=page)


class AlwaysFailsTask(task.Task):
    """Always fails: after one retry it lands in the dead-letter queue."""

    queue = 'default'
    time_limit = 5
    max_retries = 1

    def run_task(self, *args, **kwargs):
        raise ValueError('this input can never be processed')

    def on_permanent_failure(self, exc, reason):
        record(self, 'dead_lettered', reason=reason)


class SlowReportTask(task.Task):
    """A slow task on the low-priority queue: it usually takes under a second;
    a run over target_runtime is logged as slow, one over time_limit fails."""

    queue = 'low_priority'
    time_limit = 10
    target_runtime = 2

    def run_task(self, seconds=0.3, *args, **kwargs):
        time.sleep(seconds)
        record(self, 'done', seconds=seconds, pid=os.getpid())


class CountWordsTask(task.Task):
    """Counts the words of a text: a workflow's fan-out (see ``workflow_flow``)."""

    queue = 'default'
    time_limit = 5

    def run_task(self, text, *args, **kwargs):
        return len(text.split())


class SumCountsTask(task.Task):
    """Adds up the counts of a workflow's group: a chord's callback."""

    queue = 'low_priority'
    time_limit = 5

    def run_task(self, counts, *args, **kwargs):
        return sum(counts)


def workflow_flow(texts):
    """A chord: count each text's words side by side (``workflow.map``, a node
    per text, on the high-priority queue by ``with_options``), then sum them."""
    from kale import workflow
    counts = workflow.map(CountWordsTask.with_options(queue='high_priority'), texts)
    return workflow.chord(counts, SumCountsTask.s())


class ConfirmOrderTask(task.Task):
    """Published through the outbox, in the transaction that stores the order."""

    queue = 'default'
    time_limit = 5

    def run_task(self, order_id, *args, **kwargs):
        return 'order %s confirmed' % order_id


class SendReceiptTask(task.Task):
    """One subscriber of the topic ``orders``: its own copy of each event."""

    queue = 'default'
    subscribes = ('orders',)
    time_limit = 5

    def run_task(self, event, *args, **kwargs):
        return 'receipt for order %s' % event['order_id']


class UpdateStockTask(task.Task):
    """Another subscriber of ``orders``, on another queue, with its own retries."""

    queue = 'low_priority'
    subscribes = ('orders',)
    time_limit = 5

    def run_task(self, event, *args, **kwargs):
        return {'sku': event['sku'], 'reserved': 1}


class DailyDigestTask(task.Task):
    """A periodic task: `kale scheduler` (or `kale worker --scheduler`)
    publishes it every day at 07:00 in Paris; `kale schedules run` publishes
    one run now."""

    queue = 'low_priority'
    time_limit = 5
    schedule = '0 7 * * *'
    schedule_tz = 'Europe/Paris'

    def run_task(self, *args, **kwargs):
        return 'digest sent'
