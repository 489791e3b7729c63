"""Task classes for the flow-control tests (rate and concurrency limits)."""
import threading
import time

from kale import task


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

