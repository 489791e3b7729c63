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


class Mark(task.Task):
    """Adds one to ``value`` after noting its process id in the file at
    ``path`` and sleeping ``sleep`` seconds (a test counts the runs, and
    knows which worker runs it)."""
    queue = 'default'
    time_limit = 20

    def run_task(self, value, path, sleep=0.0):
        import os
        import time
        with open(path, 'a') as out:
            out.write('%d\n' % os.getpid())
        time.sleep(sleep)
        return value + 1


#: What Tally and TallyTotal ran, in order (a test clears it), and the values
#: Tally fails on for now (a cause a test fixes by emptying it).
RUNS: list = []
FAILING: set = set()


class Tally(task.Task):
    """Doubles ``value``, noting the run in RUNS; fails for good while
    ``value`` is in FAILING."""
    queue = 'default'
    time_limit = 5
    max_retries = 0

    def run_task(self, value):
        RUNS.append(value)
        if value in FAILING:
            raise ValueError('cannot take %r yet' % (value,))
        return value * 2


class TallyTotal(task.Task):
    """The sum of a list, noting its run in RUNS as 'total'."""
    queue = 'default'
    time_limit = 5

    def run_task(self, values):
        RUNS.append('total')
        return sum(values)
