"""Task classes the pool tests publish: plain and coroutine tasks that record
when they start and end, and ones that outlast their limits."""
import asyncio
import os
import threading
import time

from kale import task
from kale.exceptions import TimeLimitExceeded
from tests.tasks import record


class AsyncRecordTask(task.Task):
    queue = 'default'
    time_limit = 5

    async def run_task(self, *args):
        await asyncio.sleep(0)
        record('ran', self, *args)
        return len(args)


class SpanTask(task.Task):
    """Records its start and end, ``seconds`` apart (blocking)."""
    queue = 'default'
    time_limit = 10

    def run_task(self, seconds=0.2):
        record('start', self)
        time.sleep(seconds)
        record('end', self)


class ShortSpanTask(SpanTask):
    """A SpanTask on the 'short' queue (visibility timeout 4 s), limited to 2 s."""
    queue = 'short'
    time_limit = 2


class AsyncFailingTask(task.Task):
    """Fails after an await, every time."""
    queue = 'default'
    max_retries = 0

    async def run_task(self):
        await asyncio.sleep(0)
        raise ValueError('bad input')


class AsyncSpanTask(task.Task):
    """Records its start and end, ``seconds`` apart (awaiting)."""
    queue = 'default'
    time_limit = 10

    async def run_task(self, seconds=0.2):
        record('start', self)
        await asyncio.sleep(seconds)
        record('end', self)


class AsyncHeldTask(task.Task):
    """Records its start and end, and between them awaits until a test sets
    ``released`` (15 s at most): a test sees it running however slowly it
    looks, rather than within a run of fixed length."""
    queue = 'default'
    time_limit = 20
    released = threading.Event()

    async def run_task(self):
        record('start', self)
        deadline = time.monotonic() + 15
        while not AsyncHeldTask.released.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        record('end', self)


class CappedSpanTask(SpanTask):
    """At most two at once in a worker."""
    max_concurrency = 2


class AsyncOverLimitTask(task.Task):
    """Awaits past its time limit; fails for good."""
    queue = 'default'
    time_limit = 0.3
    max_retries = 0

    async def run_task(self):
        await asyncio.sleep(30)

    def after_failure(self, exc):
        record('after_failure', self, 'TimeLimitExceeded' if isinstance(exc, TimeLimitExceeded)
               else type(exc).__name__)


class BusyOverLimitTask(task.Task):
    """Computes past its time limit (Python code: a thread can be interrupted)."""
    queue = 'default'
    time_limit = 0.3
    max_retries = 0

    def run_task(self):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pass

    def after_failure(self, exc):
        record('after_failure', self, 'TimeLimitExceeded' if isinstance(exc, TimeLimitExceeded)
               else type(exc).__name__)


class StuckTask(task.Task):
    """Blocks in one C call far past its time limit: no interruption reaches it."""
    queue = 'default'
    time_limit = 0.2
    max_retries = 0

    def run_task(self, seconds=30):
        record('start', self)
        time.sleep(seconds)


class LoopBlockingTask(task.Task):
    """A coroutine that blocks its event loop (a blocking call in async def)."""
    queue = 'default'
    time_limit = 5

    async def run_task(self, seconds=1.0):
        time.sleep(seconds)
        record('ran', self)


class AsyncHooksTask(task.Task):
    """Coroutine hooks around a plain run_task."""
    queue = 'default'
    time_limit = 5

    async def should_run_task(self, go=True):
        await asyncio.sleep(0)
        return go

    async def before_run(self, go=True):
        await asyncio.sleep(0)
        record('before', self)

    def run_task(self, go=True):
        record('ran', self)
        return 'done'

    async def after_success(self, result):
        await asyncio.sleep(0)
        record('after', self, result)


class StuckOnceTask(task.Task):
    """On the 'short' queue (visibility timeout 4 s): its first run anywhere
    blocks in one C call for 4 s, past its limit and the stuck grace; later
    runs end at once."""
    queue = 'short'
    time_limit = 0.5

    def run_task(self):
        marker = os.environ['KALE_TEST_RECORD'] + '.stuck'
        if not os.path.exists(marker):
            open(marker, 'w').close()
            record('stuck', self)
            time.sleep(4)
        record('ran', self)


class AsyncShortTask(task.Task):
    """An awaiting task on the 'short' queue (visibility timeout 4 s)."""
    queue = 'short'
    time_limit = 2

    async def run_task(self, seconds=0.0):
        record('start', self)
        await asyncio.sleep(seconds)
        record('ran', self)


class AsyncRecoveryTask(AsyncSpanTask):
    """An AsyncSpanTask on the 'recovery' queue (visibility timeout 30 s)."""
    queue = 'recovery'
    time_limit = 17


#: Set by a BlockedTask as it blocks; set BLOCKED to let its run end.
BLOCKING = threading.Event()
BLOCKED = threading.Event()


class BlockedTask(task.Task):
    """Blocks in one C call (a lock's wait) until BLOCKED is set: neither a
    time limit's nor a stop's interruption reaches it meanwhile."""
    queue = 'default'
    time_limit = 20

    def run_task(self):
        record('start', self)
        BLOCKING.set()
        BLOCKED.wait()


class AsyncQuickTask(task.Task):
    """Awaits ``seconds``, well within its short time limit."""
    queue = 'default'
    time_limit = 0.5

    async def run_task(self, seconds=0.05):
        await asyncio.sleep(seconds)
        record('ran', self)
