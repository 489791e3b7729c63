"""Tasks the outbox tests publish: each run appends its argument to a file."""
from kale import task


class Note(task.Task):
    """Appends ``text`` and a newline to the file at ``path``."""
    queue = 'default'
    time_limit = 5

    def run_task(self, path, text):
        with open(path, 'a') as out:
            out.write('%s\n' % text)


class OrderedNote(Note):
    queue = 'ordered'


class UniqueNote(Note):
    """At most one waiting or running per arguments, for a minute."""
    unique_for_sec = 60


class FinalNote(Note):
    """Fails for good at the first error (a path that cannot be written)."""
    max_retries = 0
