"""Subscribers the topic tests use: each appends what it got to a file
named in the event, so a test sees which copy ran how often."""
from kale import task


def note(event, who):
    with open(event['out'], 'a') as out:
        out.write('%s %s\n' % (who, event['n']))


class ReceiptMailer(task.Task):
    """Succeeds at once."""
    queue = 'default'
    subscribes = ('orders',)
    time_limit = 5

    def run_task(self, event):
        note(event, 'mail')


class StockUpdater(task.Task):
    """Fails its first run of each event, then succeeds (retried on its own)."""
    queue = 'high'
    subscribes = ('orders',)
    time_limit = 5
    max_retries = 2

    def run_task(self, event):
        note(event, 'stock-attempt-%d' % self.message.attempt)
        if self.message.attempt == 1:
            raise RuntimeError('the stock service is down')


class AcmeAudit(task.Task):
    """Only the events labelled tenant=acme."""
    queue = 'low'
    subscribes = ('orders', 'refunds')
    subscription_labels = {'tenant': 'acme'}
    time_limit = 5

    def run_task(self, event):
        note(event, 'acme')


class NotASubscriber(task.Task):
    queue = 'default'

    def run_task(self, event):
        raise AssertionError('never runs')
