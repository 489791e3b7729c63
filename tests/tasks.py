"""Task classes the test suite publishes and runs."""
from kale import task


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


class TooSlowForQueueTask(task.Task):
    queue = 'default'
    time_limit = 30        # the test queue's visibility timeout is 30

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
    queue = 'default'
    time_limit = 0

    def run_task(self):
        pass
