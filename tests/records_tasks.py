"""Task classes for the records tests."""
import os
import time

from kale import task


class PlainTask(task.Task):
    queue = 'default'
    time_limit = 5
    ran: list = []

    def run_task(self, n):
        self.ran.append(n)


class LowPlainTask(PlainTask):
    queue = 'low'


class ResultTask(task.Task):
    queue = 'default'
    time_limit = 5
    store_result = True

    def run_task(self, a, b):
        return {'sum': a + b, 'items': (a, b)}


class LabelledTask(task.Task):
    queue = 'default'
    time_limit = 5

    @classmethod
    def labels(cls, tenant, *args, **kwargs):
        return {'tenant': tenant}

    def run_task(self, tenant, n):
        pass


class BrokenTask(task.Task):
    queue = 'default'
    time_limit = 5
    max_retries = 0

    def run_task(self):
        raise ValueError('bad input 42')


class NamedTask(PlainTask):
    """Succeeds, under an id the application makes."""

    @classmethod
    def make_task_id(cls, n):
        return 'named-ok-%s' % n


class NamedBrokenTask(BrokenTask):
    """Fails for good, under an id the application makes: publishing it again
    starts a new life of the same record."""

    @classmethod
    def make_task_id(cls, name):
        return 'named-%s' % name

    def run_task(self, name):
        raise ValueError('bad input 42')


class SecretTask(task.Task):
    queue = 'default'
    time_limit = 5
    record_args = False

    def run_task(self, secret):
        pass


class NapTask(task.Task):
    """Sleeps a little: long enough for a test to see it running."""

    queue = 'default'
    time_limit = 5
    store_result = True

    def run_task(self, seconds, *args):
        time.sleep(seconds)
        return os.getpid()


class SelfAwareTask(task.Task):
    """Returns the status its own record has while it runs."""

    queue = 'default'
    time_limit = 5
    store_result = True

    def run_task(self):
        from kale import records
        return records.get(self.task_id).status


class TwiceBrokenTask(task.Task):
    """Fails its first two runs, then succeeds (three attempts in its history)."""

    queue = 'default'
    time_limit = 5
    max_retries = 3

    def run_task(self):
        if self.message.retry_num < 2:
            raise ValueError('attempt %d fails' % (self.message.attempt))
        return 'third time'


class TellingBrokenTask(task.Task):
    """Fails for good, saying what it was given (in its error and traceback)."""
    queue = 'default'
    time_limit = 5
    max_retries = 0

    def run_task(self, given):
        raise ValueError('refused %s' % given)


class SwitchTask(task.Task):
    """Fails while ``failing`` is set, else succeeds (retries from records)."""
    queue = 'default'
    time_limit = 5
    max_retries = 0
    failing = True

    def run_task(self, *args):
        if SwitchTask.failing:
            raise ValueError('switched off')
        return list(args)
