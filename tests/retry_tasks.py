"""Task classes that ask for their own retry delay (``raise Retry(after=...)``):
plain and coroutine ones, one on the FIFO queue, one that notes its runs on a
test's clock, and one whose cause cannot be pickled."""
import asyncio
import threading

from kale import Retry, task
from kale.exceptions import NonRetriableTaskError
from tests.tasks import record


class ThrottledError(NonRetriableTaskError):
    """A partner's 429, as a task might raise it; non-retriable by the task's
    EXCEPTION_LIST, so only a Retry retries it."""


def throttled(cause):
    return ThrottledError('429 Too Many Requests') if cause else None


class RetryAfterTask(task.Task):
    """Records each start with its retry number; raises Retry(after=...)
    while it has failed fewer than ``times`` times, then records 'ran'."""

    queue = 'default'
    time_limit = 5
    max_retries = 2

    def run_task(self, after, times=1, cause=True):
        record('start', self, self.message.retry_num)
        if self.message.failure_num < times:
            raise Retry(after=after, exc=throttled(cause))
        record('ran', self)


class AsyncRetryAfterTask(task.Task):
    """RetryAfterTask as a coroutine: the Retry is raised after an await."""

    queue = 'default'
    time_limit = 5
    max_retries = 2

    async def run_task(self, after, times=1, cause=True):
        record('start', self, self.message.retry_num)
        await asyncio.sleep(0)
        if self.message.failure_num < times:
            raise Retry(after=after, exc=throttled(cause))
        record('ran', self)


class OrderedRetryTask(task.Task):
    """On the FIFO 'ordered' queue: ``label`` asks for a retry after
    ``after`` seconds on its first ``times`` runs."""

    queue = 'ordered'
    time_limit = 5
    max_retries = 2

    def run_task(self, label, after=0, times=0):
        record('start', self, label)
        if self.message.retry_num < times:
            raise Retry(after=after, exc=throttled(True))
        record('ran', self, label)


class LaterTask(task.Task):
    """Asks for a retry after ``after`` seconds on its first run, then notes
    in ``runs`` when each later run started by its class's ``clock`` (a
    test's), with the message's counts and due time."""

    queue = 'default'
    time_limit = 5
    clock = None
    runs: list = []

    def run_task(self, after, data=b''):
        message = self.message
        if message.failure_num == 0:
            raise Retry(after=after, exc=throttled(True))
        LaterTask.runs.append((self.task_id, LaterTask.clock.time(), message.retry_num,
                               message.failure_num, message.due_at))


class UnpicklableCauseTask(task.Task):
    """Asks for a retry after 30 s with a cause that cannot be pickled."""

    queue = 'default'
    time_limit = 5

    def run_task(self):
        error = ValueError('carries a lock')
        error.lock = threading.Lock()
        raise Retry(after=30, exc=error)
