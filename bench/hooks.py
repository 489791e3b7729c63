"""A worker hook that reports what the benchmark measures in a worker process."""
from __future__ import annotations

import json
import os
import resource
import time

from bench import tasks
from bench.counter import RequestCounter
from kale.app import default_app
from kale.conf import settings
from kale.hooks import WorkerHooks

REPORT_VARIABLE = 'KALE_BENCH_REPORT'
#: Beside the report: written once the worker has started.
READY_SUFFIX = '.ready'


def peak_rss_mb() -> float:
    """This process's peak resident memory. On Linux, VmHWM: ru_maxrss survives
    exec, so a process started from a big parent would report the parent's size."""
    try:
        with open('/proc/self/status') as f:
            for line in f:
                if line.startswith('VmHWM:'):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def records_written_at() -> float:
    """When this process last wrote task records (0: records off, or none)."""
    if not settings.RECORDS_URL:
        return 0.0
    return default_app().recorder.last_written_at


class BenchHooks(WorkerHooks):
    """Counts the worker's requests, tasks and CPU time; writes them to
    $KALE_BENCH_REPORT at exit. Time and CPU run from the worker's start-up to
    its last task (``cpu_sec``: user + system, every thread of the process)."""

    def __init__(self):
        self.counter = RequestCounter()
        self.started = 0.0
        self.cpu_started = 0.0
        self.tasks = 0
        self.flow_requests = 0
        self.flow_transactions = 0

    def _count_flow(self, engine):
        from sqlalchemy import event

        def statement(*args):         # a statement sent; an executemany is one
            self.flow_requests += 1

        def commit(*args):
            self.flow_transactions += 1
        event.listen(engine, 'before_cursor_execute', statement)
        event.listen(engine, 'commit', commit)

    def on_worker_startup(self, worker):
        client = getattr(worker.broker.transport, 'client', None)
        if client is not None:
            self.counter.attach(client)
        if settings.RATE_LIMIT_URL:      # flow control's requests and transactions
            self._count_flow(worker.flow.store.engine)
        self.started = time.time()
        self.cpu_started = time.process_time()
        path = os.environ.get(REPORT_VARIABLE)
        if path:                 # the bench waits for it before it measures
            open(path + READY_SUFFIX, 'w').close()

    def on_task_succeeded(self, settlement):
        self.tasks += 1

    def on_worker_shutdown(self, worker):
        path = os.environ.get(REPORT_VARIABLE)
        if not path:
            return
        report = {'started': self.started, 'last_run': tasks.LAST_RUN_AT[0], 'tasks': self.tasks,
                  'cpu_sec': tasks.LAST_RUN_CPU[0] - self.cpu_started,
                  # Records (when on) were written by the records hooks' shutdown, just before.
                  'records_written_at': records_written_at(),
                  'cpu_sec_to_exit': time.process_time() - self.cpu_started,
                  'requests': self.counter.events, 'peak_rss_mb': peak_rss_mb(),
                  'flow_requests': self.flow_requests,
                  'flow_transactions': self.flow_transactions}
        with open(path, 'w') as f:
            json.dump(report, f)
