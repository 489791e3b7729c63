"""Task classes of the periodic-task tests: two that declare their own
schedules (found with TASK_MODULES = ('tests.schedule_tasks',)) and one that
SCHEDULES entries name. Each run appends ``ran <task id> <args>`` to the
file KALE_TEST_RECORD names, when it names one."""
import os

from kale import task
from tests.support.records import append_line


def _note(task_id, *args):
    path = os.environ.get('KALE_TEST_RECORD')
    if path:
        append_line(path, ' '.join(['ran', task_id, *map(str, args)]))


class NightlyReport(task.Task):
    queue = 'default'
    time_limit = 5
    schedule = '0 3 * * *'
    schedule_tz = 'Europe/Paris'
    schedule_args = ('eu',)
    schedule_kwargs = {'full': True}

    def run_task(self, region, full=False):
        _note(self.task_id, region, full)


class EveryFiveSeconds(task.Task):
    queue = 'low'
    time_limit = 5
    schedule = 5
    schedule_catch_up = 'all'

    def run_task(self):
        _note(self.task_id)


class Tick(task.Task):
    """Scheduled only through SCHEDULES."""

    queue = 'default'
    time_limit = 5

    def run_task(self, *args, **kwargs):
        _note(self.task_id, *args)
