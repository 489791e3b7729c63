"""The shop's tasks, found by Kale as the app's ``tasks`` module."""
import os

from kale import task


class Note(task.Task):
    """Appends ``text`` and a newline to the file at ``path``."""
    queue = 'default'
    time_limit = 5

    def run_task(self, path, text):
        with open(path, 'a') as out:
            out.write('%s\n' % text)


class Nightly(task.Task):
    """A periodic task: found by `kale schedules list` in this module."""
    queue = 'default'
    schedule = '0 3 * * *'

    def run_task(self):
        pass


def _ran(name, order_id):
    with open(os.environ['KALE_TEST_DJANGO_RUNS'], 'a') as out:
        out.write('%s %s\n' % (name, order_id))


class SendConfirmation(task.Task):
    """The README's example task: notes its run in $KALE_TEST_DJANGO_RUNS."""
    queue = 'default'

    def run_task(self, order_id):
        _ran('SendConfirmation', order_id)


class ChargeCard(SendConfirmation):
    def run_task(self, order_id):
        _ran('ChargeCard', order_id)
