"""Task classes with dead-letter handlers (``run_dead_task``), for the tests
of dead runs; each records what ran in the file named by KALE_TEST_RECORD."""
from kale import task
from kale.exceptions import NonRetriableTaskError
from tests.tasks import record


class PaymentTask(task.Task):
    """Fails for good at once; its dead run fails once, then succeeds."""

    queue = 'default'
    time_limit = 5
    max_retries = 1

    def run_task(self, order, amount=0):
        record('start', self, order)
        raise NonRetriableTaskError('card %s refused' % order)

    def run_dead_task(self, error, order, amount=0):
        record('dead', self, self.message.dead_of, order, amount, error.replace(' ', '_'))
        if self.message.failure_num == 0:
            raise ConnectionError('refund service down')
        record('dead_done', self, self.message.dead_of)
        return {'refunded': order}


class RetriedTask(task.Task):
    """Fails every run: retried, then fails for good; its dead run succeeds."""

    queue = 'default'
    time_limit = 5
    max_retries = 1
    store_result = True

    def run_task(self, n):
        record('start', self, n)
        raise ValueError('bad input %s' % n)

    def run_dead_task(self, error, n):
        record('dead', self, self.message.dead_of, n, error.replace(' ', '_'))
        return 'handled %s' % n


class AsyncDeadTask(task.Task):
    """A coroutine handler on a plain task."""

    queue = 'default'
    time_limit = 5
    max_retries = 0

    def run_task(self, n):
        raise ValueError('nope')

    async def run_dead_task(self, error, n):
        record('dead', self, self.message.dead_of, n)
        return n


class HopelessTask(task.Task):
    """Fails for good, and so does its dead run (retried once first)."""

    queue = 'default'
    time_limit = 5
    max_retries = 1

    def run_task(self, n):
        record('start', self, n)
        raise NonRetriableTaskError('no')

    def run_dead_task(self, error, n):
        record('dead', self, self.message.dead_of, n)
        raise RuntimeError('handler broke too')


class NoHandlerTask(task.Task):
    """Fails for good and defines no handler: a plain dead letter."""

    queue = 'default'
    time_limit = 5
    max_retries = 0

    def run_task(self, n):
        record('start', self, n)
        raise ValueError('plain')


class OrderedPaymentTask(PaymentTask):
    """PaymentTask on the FIFO queue."""

    queue = 'ordered'
