"""Task classes the test suite publishes and runs."""
import hashlib
import os
import time

from kale import task
from kale.exceptions import NonRetriableTaskError
from tests.support.records import append_line


class AddTask(task.Task):
    queue = 'default'
    time_limit = 5

    def run_task(self, a, b, **kwargs):
        return a + b


class HighTask(task.Task):
    queue = 'high'
    time_limit = 5

    def run_task(self, *args, **kwargs):
        return args, kwargs


class EchoTask(task.Task):
    queue = 'default'
    time_limit = 5

    def run_task(self, *args, **kwargs):
        return {'args': args, 'kwargs': kwargs, 'app_data': self.app_data}


class FailingTask(task.Task):
    queue = 'default'
    time_limit = 5

    def run_task(self, *args, **kwargs):
        raise RuntimeError('boom')


class SkippedTask(task.Task):
    queue = 'default'
    time_limit = 5
    ran = []

    def should_run_task(self, *args, **kwargs):
        return False

    def run_task(self, *args, **kwargs):
        self.ran.append(args)


class UnknownQueueTask(task.Task):
    queue = 'no_such_queue'

    def run_task(self):
        pass


class LongerThanVisibilityTask(task.Task):
    queue = 'default'
    time_limit = 3600      # the test queue's visibility timeout is 30

    def run_task(self):
        pass


class OverTwelveHoursTask(task.Task):
    queue = 'default'
    time_limit = 12 * 3600 + 1

    def run_task(self):
        pass


class FractionalLimitTask(task.Task):
    queue = 'default'
    time_limit = 0.25

    def run_task(self):
        pass


class NotATask:
    """Importable, but not a Task: messages naming it are refused."""


class ZeroLimitTask(task.Task):
    """Its time_limit is set to 0 by a test after the class is defined (a
    class that says time_limit = 0 is refused when defined)."""
    queue = 'default'
    time_limit = 5

    def run_task(self):
        pass


# --- tasks that record what happened, for worker tests -----------------------
#
# Each appends one line "<event> <task id> <pid> <time> <details>" to the file
# named by KALE_TEST_RECORD (shared by worker processes; appends are atomic).

def record(event, task_inst, *details):
    path = os.environ.get('KALE_TEST_RECORD')
    if path:
        line = ' '.join([event, str(task_inst.task_id), str(os.getpid()), '%.3f' % time.time()]
                        + [str(d) for d in details])
        append_line(path, line)


class RecordTask(task.Task):
    queue = 'default'
    time_limit = 5

    def run_task(self, *args, pause_sec=0.0, **kwargs):
        record('ran', self, *args)
        time.sleep(pause_sec)           # a run that takes time: the work is shared


class HighRecordTask(RecordTask):
    queue = 'high'


class LowRecordTask(RecordTask):
    queue = 'low'


class SleepTask(task.Task):
    """Sleeps; records start and finish. Used for time limits and shutdown."""

    queue = 'default'
    time_limit = 1.0
    max_retries = 2

    def run_task(self, seconds, *args, **kwargs):
        record('start', self, self.message.retry_num if self.message else 0)
        # In short sleeps: a pool's thread is stopped between two, as it
        # would be in any Python code (a signal cuts even one long sleep).
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(min(0.05, max(deadline - time.monotonic(), 0)))
        record('ran', self)

    def after_failure(self, exc):
        record('failed', self, type(exc).__name__)

    def on_permanent_failure(self, exc, reason):
        record('permanent', self, reason)


class NonRetriableTask(task.Task):
    queue = 'default'
    time_limit = 5
    max_retries = 5

    def run_task(self, *args, **kwargs):
        record('start', self)
        raise NonRetriableTaskError('never again')

    def on_permanent_failure(self, exc, reason):
        record('permanent', self, reason)


class FlakyOnceTask(task.Task):
    """Fails on its first attempt, succeeds on the retry."""

    queue = 'default'
    time_limit = 5

    def run_task(self, *args, **kwargs):
        if self.message.failure_num == 0:
            record('failed', self)
            raise ConnectionError('transient')
        record('ran', self, self.message.retry_num)


class BudgetTask(task.Task):
    """On the 'budget' queue (visibility timeout 5 s): each run sleeps 2 s."""

    queue = 'budget'
    time_limit = 3
    max_retries = 0

    def run_task(self, *args, **kwargs):
        record('start', self)
        time.sleep(2)
        record('ran', self)


class ShortVisibilityTask(task.Task):
    """On the 'short' queue (visibility timeout 4 s)."""

    queue = 'short'
    time_limit = 2

    def run_task(self, seconds=0.0, *args, **kwargs):
        record('start', self)
        time.sleep(seconds)
        record('ran', self)


class LongTask(task.Task):
    """On the 'beat' queue (visibility timeout 3 s), with a longer time limit:
    it runs alone while the worker's heartbeat keeps its message invisible."""

    queue = 'beat'
    time_limit = 20
    max_retries = 0

    def run_task(self, seconds=0.0, *args, **kwargs):
        record('start', self)
        time.sleep(seconds)
        record('ran', self)


class BeatRecordTask(RecordTask):
    queue = 'beat'
    time_limit = 1


class OrderedTask(task.Task):
    """On the FIFO 'ordered' queue: fails its first ``fail_times`` runs."""

    queue = 'ordered'
    time_limit = 5
    max_retries = 2

    def run_task(self, label, fail_times=0, seconds=0.0):
        if self.message.retry_num < fail_times:
            record('failed', self, label)
            raise ValueError('%s fails %d times' % (label, fail_times))
        time.sleep(seconds)
        record('ran', self, label)


class OrderedLongTask(OrderedTask):
    """Longer than the 'ordered' queue's visibility timeout: runs alone."""

    time_limit = 60


class SlowTask(task.Task):
    """Two seconds of work (for shutdown tests)."""

    queue = 'default'
    time_limit = 5

    def run_task(self, seconds=2.0, *args, **kwargs):
        record('start', self)
        time.sleep(seconds)
        record('ran', self)


class QuickTask(task.Task):
    """A tenth of a second of work (so an outage can happen mid-run)."""

    queue = 'default'
    time_limit = 5

    def run_task(self, *args, **kwargs):
        time.sleep(0.1)
        record('ran', self)


class CrashOnceTask(task.Task):
    """Kills its own worker process the first time it runs anywhere."""

    queue = 'short'
    time_limit = 2

    def run_task(self, *args, **kwargs):
        import signal
        marker = os.environ['KALE_TEST_RECORD'] + '.crashed'
        if not os.path.exists(marker):
            open(marker, 'w').close()
            record('crash', self)
            os.kill(os.getpid(), signal.SIGKILL)
        record('ran', self)


class ShortRecordTask(RecordTask):
    queue = 'short'
    time_limit = 2


class CrashEveryTimeTask(task.Task):
    """Kills its own worker process every time it runs."""

    queue = 'short'
    time_limit = 2
    max_retries = 1

    def run_task(self, *args, **kwargs):
        import signal
        record('crash', self)
        os.kill(os.getpid(), signal.SIGKILL)


class RegexHangTask(task.Task):
    """Hangs inside the regular-expression engine, which never checks for signals."""

    queue = 'default'
    time_limit = 0.5
    max_retries = 2

    def run_task(self, *args, **kwargs):
        import re
        record('start', self)
        re.match(r'(a+)+$', 'a' * 40 + 'b')       # catastrophic backtracking: hours
        record('ran', self)


class IgnoresAlarmTask(task.Task):
    """Turns the timeout signal off, then never returns."""

    queue = 'default'
    time_limit = 0.5
    max_retries = 2

    def run_task(self, *args, **kwargs):
        import signal
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        record('start', self)
        while True:
            time.sleep(0.01)


class CustomError(Exception):
    pass


class RaisesCustomTask(task.Task):
    queue = 'default'
    time_limit = 5

    def run_task(self, *args, **kwargs):
        raise CustomError('custom %s' % (args,))


class UnpicklableErrorTask(task.Task):
    queue = 'default'
    time_limit = 5

    def run_task(self, *args, **kwargs):
        error = ValueError('carries a lock')
        import threading
        error.lock = threading.Lock()
        raise error


class RefusedError(NonRetriableTaskError):
    """A non-retriable error whose __init__ takes other arguments than its message."""

    def __init__(self, code):
        super().__init__('refused with code %d' % code)
        self.code = code


class RefusesTask(task.Task):
    queue = 'default'
    time_limit = 5
    max_retries = 3

    def run_task(self, *args, **kwargs):
        raise RefusedError(7)


class DigestTask(task.Task):
    """Records the SHA-256 and length of its bytes argument (payloads kept in
    S3); fails its first ``fail_times`` attempts."""

    queue = 'default'
    time_limit = 10
    max_retries = 1

    def run_task(self, data, fail_times=0, **kwargs):
        digest = hashlib.sha256(data).hexdigest()
        if self.message.failure_num < fail_times:
            record('failed', self, digest)
            raise ConnectionError('transient')
        record('ran', self, digest, len(data))

    def on_permanent_failure(self, exc, reason):
        record('permanent', self, reason)


class OrderedDigestTask(DigestTask):
    """DigestTask on the FIFO 'ordered' queue."""

    queue = 'ordered'


class LoggingTask(task.Task):
    """Logs one line while it runs (its argument is a secret never to be logged)."""

    queue = 'default'
    time_limit = 5

    def run_task(self, secret=None, *args, **kwargs):
        import logging
        logging.getLogger('tests.tasks').warning('logging from inside the task')


class TraceTask(task.Task):
    """Remembers the trace span that is current while it runs."""

    queue = 'default'
    time_limit = 5
    max_retries = 1
    spans: list = []

    def run_task(self, fail=False, *args, **kwargs):
        from opentelemetry import trace
        TraceTask.spans.append(trace.get_current_span().get_span_context())
        if fail and self.message.retry_num == 0:
            raise RuntimeError('first attempt fails')


class RacingLongTask(task.Task):
    """On 'rp-slow' (a queue config of the test's own): longer than its
    queue's visibility timeout, so it runs alone under a heartbeat."""

    queue = 'rp-slow'
    time_limit = 8
    max_retries = 0

    def run_task(self, seconds=0.0):
        record('start', self)
        time.sleep(seconds)
        record('ran', self)


class RacingQuickTask(task.Task):
    """On 'rp-fast' (a queue config of the test's own): a quick task."""

    queue = 'rp-fast'
    time_limit = 1
    max_retries = 2

    def run_task(self):
        record('ran', self)


class ClockedTask(task.Task):
    """Moves its class's ``clock`` (a test's FakeClock) by ``seconds`` instead of sleeping."""

    queue = 'default'
    time_limit = 90
    clock = None

    def run_task(self, seconds):
        ClockedTask.clock.advance(seconds)


class ClockedTargetTask(ClockedTask):
    target_runtime = 60


class ClockedQuickTask(ClockedTask):
    """A ClockedTask that fits a batch of the 'default' queue."""

    time_limit = 5

    def run_task(self, seconds):
        record('start', self, ClockedTask.clock.now)
        ClockedTask.clock.advance(seconds)


class CopiesTask(task.Task):
    """Records how many failures the copy that ran carried (several copies
    of one task are sent by hand; the 'budget' queue receives ten at once)."""
    queue = 'budget'
    time_limit = 1

    def run_task(self, *args):
        record('ran', self, self.message.failure_num)


class DueTask(task.Task):
    """Notes in ``runs`` when each run started by its class's ``clock`` (a
    test's), with the message's counts: a task published to wait."""

    queue = 'default'
    time_limit = 5
    clock = None
    runs: list = []

    def run_task(self, *args):
        message = self.message
        DueTask.runs.append((self.task_id, DueTask.clock.time(), message.retry_num,
                             message.failure_num, message.due_at))


class RetriedTellingTask(task.Task):
    """Fails saying what it was given, retried once at once, then succeeds."""
    queue = 'default'
    time_limit = 5
    max_retries = 1

    @classmethod
    def retry_delay_sec(cls, retry_num):
        return 0

    def run_task(self, given):
        if self.message.failure_num == 0:
            raise ValueError('refused %s' % given)


class ResizeImage(task.Task):
    """The README's example task ("Testing with a worker ... in memory")."""
    queue = 'default'
    time_limit = 5

    def run_task(self, image_id, width=0):
        return image_id + width


class PoisonTask(task.Task):
    """Kills its worker every time it runs, in the test's own process (see
    tests/support/killed.py): SQS's redrive policy must dead-letter it."""

    queue = 'default'
    time_limit = 5

    def run_task(self, *args, pause_sec=0.0, **kwargs):
        from tests.support.killed import kill
        record('poison', self)
        time.sleep(pause_sec)           # as a process may take a while to crash
        kill()
