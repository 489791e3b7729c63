"""A worker hook that writes one JSON line per task outcome.

`make demo` reads these lines to draw its progress line and summary. Set
KALE_EXAMPLE_OUTCOMES to a file path to turn it on.
"""
import json
import os

from kale.hooks import WorkerHooks


class OutcomeFile(WorkerHooks):
    """Appends {"queue", "task", "id", "outcome"} to $KALE_EXAMPLE_OUTCOMES."""

    def __init__(self):
        self.path = os.environ.get('KALE_EXAMPLE_OUTCOMES', '')
        self.queue = ''

    def _write(self, settlement, outcome):
        if not self.path:
            return
        line = json.dumps({'queue': self.queue, 'task': settlement.task_name.rsplit('.', 1)[-1],
                           'id': settlement.task_id, 'outcome': outcome})
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + '\n').encode())
        finally:
            os.close(fd)

    def before_batch(self, queue, batch):
        self.queue = queue.name     # the outcomes that follow are this batch's

    def on_task_succeeded(self, settlement):
        self._write(settlement, 'done')

    def on_task_retried(self, settlement):
        self._write(settlement, 'retried')

    def on_task_dead_lettered(self, settlement):
        self._write(settlement, 'dead-lettered')

    def on_task_released(self, settlement):
        self._write(settlement, 'released')
