"""The shop's tasks, found by Kale as the app's ``tasks`` module."""
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
