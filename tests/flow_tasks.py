"""Task classes for the flow-control tests (rate and concurrency limits)."""
import os
import threading
import time

from kale import task
from tests.support.records import append_line


class Runs:
    """What ran: (key, start, end, attempt), and the most at once."""

    def __init__(self):
        self.lock = threading.Lock()
        self.clear()

    def clear(self):
        self.items = []
        self.now = 0
        self.most = 0

    def started(self):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def ended(self, key, started, attempt):
        with self.lock:
            self.now -= 1
            self.items.append((key, started, time.time(), attempt))


runs = Runs()


class RatedTask(task.Task):
    queue = 'default'
    time_limit = 5
    rate_limit = '5/s'

    def run_task(self, n):
        started = time.time()
        runs.started()
        runs.ended(n, started, self.message.attempt)


class ChangedRateTask(task.Task):
    """Defined with a good rate; a test misspells it afterwards, as a class
    changed at run time (which the definition check cannot see) would be."""
    queue = 'default'
    time_limit = 5
    rate_limit = '5/s'

    def run_task(self, n):
        runs.ended(n, time.time(), self.message.attempt)


class PerCustomerTask(task.Task):
    queue = 'default'
    time_limit = 5
    rate_limit = '2/s'

    def rate_limit_key(self, customer, n):
        return customer

    def run_task(self, customer, n):
        started = time.time()
        runs.started()
        runs.ended(customer, started, self.message.attempt)


class SlowTask(task.Task):
    queue = 'default'
    time_limit = 10
    concurrency_limit = 2

    def concurrency_key(self, n):
        return 'shared'

    def run_task(self, n):
        started = time.time()
        runs.started()
        time.sleep(1.0)
        runs.ended(n, started, self.message.attempt)


class OneAtATimeTask(task.Task):
    queue = 'default'
    time_limit = 5
    concurrency_limit = 1

    def run_task(self, n):
        started = time.time()
        runs.started()
        runs.ended(n, started, self.message.attempt)


class FleetTask(task.Task):
    """Shared by a fleet of worker processes at 5 a second (its records'
    started_at say when each ran)."""
    queue = 'default'
    time_limit = 5
    rate_limit = '5/s'

    def run_task(self, n):
        pass



class TenantTask(task.Task):
    """On the fair queue 'tenants': its tenant is its first argument; it fails
    its first run when asked to (the retry must keep the tenant)."""
    queue = 'tenants'
    time_limit = 5

    def fair_key(self, tenant, n, fail=False):
        return tenant

    def run_task(self, tenant, n, fail=False):
        started = time.time()
        runs.started()
        runs.ended((tenant, n), started, self.message.attempt)
        if fail and self.message.attempt == 1:
            raise RuntimeError('the first run of %s/%s fails' % (tenant, n))


class UntenantedTask(task.Task):
    """On the fair queue, without a fair_key: a tenant only when given."""
    queue = 'tenants'
    time_limit = 5

    def run_task(self, n):
        pass


class BadTenantTask(task.Task):
    queue = 'tenants'
    time_limit = 5

    def fair_key(self, n):
        return 'tenant with spaces é' if n else None

    def run_task(self, n):
        pass


class DoomedTenantTask(TenantTask):
    """Dead-lettered at its first failure: its dead-letter copy shows its tenant."""
    max_retries = 0


class HandledTenantTask(DoomedTenantTask):
    """Its permanent failures become dead runs, which keep the tenant too."""

    def run_dead_task(self, error, tenant, n, fail=False):
        runs.ended(('dead run', tenant, n), time.time(), self.message.attempt)


class PairTask(task.Task):
    """Two at a time across the fleet; each run writes its start and end, with
    its worker's pid, to $KALE_TEST_RECORD (worker processes share the file)."""
    queue = 'default'
    time_limit = 20
    concurrency_limit = 2

    def run_task(self, n, seconds):
        path = os.environ['KALE_TEST_RECORD']
        append_line(path, 'start %s %d %.6f' % (self.task_id, os.getpid(), time.time()))
        time.sleep(seconds)
        append_line(path, 'end %s %d %.6f' % (self.task_id, os.getpid(), time.time()))
