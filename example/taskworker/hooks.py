"""A worker hook that writes one JSON line per task outcome.

`make demo` reads these lines to draw its progress line and summary. Set
KALE_EXAMPLE_OUTCOMES to a file path to turn it on.
"""
import json
import os
import time

from kale.events import Outcome
from kale.hooks import WorkerHooks

#: What the demo calls each outcome it shows.
SHOWN = {Outcome.SUCCEEDED: 'done', Outcome.RETRY: 'retried',
         Outcome.DEAD_LETTER: 'dead-lettered', Outcome.RELEASE: 'released'}


class OutcomeFile(WorkerHooks):
    """Appends {"queue", "task", "id", "outcome", "at"} to $KALE_EXAMPLE_OUTCOMES for
    every message a worker settled (after_batch names the queue of each
    batch, on every pool: batches of a pool's worker are settled as their
    tasks end, not one after another)."""

    def __init__(self):
        self.path = os.environ.get('KALE_EXAMPLE_OUTCOMES', '')

    def after_batch(self, queue, batch):
        if not self.path:
            return
        now = round(time.time(), 3)
        lines = [json.dumps({'queue': queue.name, 'task': s.task_name.rsplit('.', 1)[-1],
                             'id': s.task_id, 'outcome': SHOWN[s.outcome], 'at': now})
                 for s in batch.settlements if s.settled and s.outcome in SHOWN]
        if not lines:
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, ''.join(line + '\n' for line in lines).encode())
        finally:
            os.close(fd)
