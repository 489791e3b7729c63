"""Tasks the workflow tests arrange into flows."""
from kale import task
from kale.exceptions import NonRetriableTaskError


class Add(task.Task):
    queue = 'default'
    time_limit = 5

    def run_task(self, a, b=0):
        return a + b


class Total(task.Task):
    """The sum of a list of numbers and of any further ones."""
    queue = 'default'
    time_limit = 5

    def run_task(self, values, *more):
        return sum(values) + sum(more)


class Pair(task.Task):
    queue = 'low'
    time_limit = 5

    def run_task(self, left, right):
        return [left, right]


class Broken(task.Task):
    """Fails for good, at once."""
    queue = 'default'
    time_limit = 5

    def run_task(self, value):
        raise NonRetriableTaskError('cannot use %r' % (value,))


class Opaque(task.Task):
    """Returns what no serializer can hold."""
    queue = 'default'
    time_limit = 5

    def run_task(self):
        return lambda: None


class Blob(task.Task):
    """Returns ``size`` bytes' worth of text."""
    queue = 'default'
    time_limit = 5

    def run_task(self, size):
        return 'x' * size


class Length(task.Task):
    queue = 'default'
    time_limit = 5

    def run_task(self, text):
        return len(text)
