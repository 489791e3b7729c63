"""Tasks that arrive before their due time: sent on, unrun, delayed by the time
still to wait (docs/explanation/internals-worker.md, "Tasks that arrive before their due time").
"""
from __future__ import annotations

import time

from kale.codec import Codec
from kale.delays import arrived_early, remaining_delay
from kale.events import Outcome, Settlement
from kale.worker.batch import Batch
from kale.worker.suspects import delayed_release


def send_on_early(batch: Batch, now: float, codec: Codec) -> int:
    """Settle each unsettled message of ``batch`` whose due time is later
    than ``now`` (epoch seconds) as waiting, with its delayed copy; returns how many."""
    if batch.fifo or not batch.opened:
        return 0
    decided = {id(s.received) for s in batch.settlements} if batch.settlements else ()
    count = 0
    for received in batch.messages:
        opened = batch.opened.get(received.message_id)
        if opened is None or id(received) in decided:
            continue
        envelope = opened.envelope
        due_at = envelope.due_at if not envelope.legacy else 0.0
        if not arrived_early(due_at, now):
            continue
        batch.settlements.append(delayed_release(
            batch, received, envelope, codec, remaining_delay(due_at, now),
            'due at %s' % time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(due_at)),  # UTC
            Outcome.WAITING, opened.message))
        count += 1
    return count


#: The outcomes :class:`WaitingCopies` notes even when it holds nothing:
#: those whose copy may be delayed.
NOTED = frozenset({Outcome.WAITING, Outcome.RETRY, Outcome.RELEASE})
#: Tasks noted per queue, at most: a serving worker whose copies other
#: workers take never sees them again (a burst with more left behind than
#: this may end before some of its own retries are back).
MAX_NOTED = 10_000


class WaitingCopies:
    """By queue, the tasks a worker sent on as waiting, and its own delayed copies
    (retries, held-back releases), not seen since: for a burst's end."""

    def __init__(self) -> None:
        self.by_queue: dict[str, set[str]] = {}
        self.retried: dict[str, set[str]] = {}

    def settled(self, queue: str, s: Settlement) -> None:
        """Note one settled message: a waiting copy sent, another delayed
        copy sent, or the task seen again."""
        if s.outcome is Outcome.WAITING and s.settled:
            _note(self.by_queue.setdefault(queue, set()), s.task_id)
            return
        if self.by_queue.get(queue):
            self.by_queue[queue].discard(s.task_id)
        if self.retried.get(queue):
            self.retried[queue].discard(s.task_id)
        if s.settled and s.retry_delay_sec > 0:
            _note(self.retried.setdefault(queue, set()), s.task_id)

    def count(self, queue: str) -> int:
        return len(self.by_queue.get(queue, ()))

    def retries(self, queue: str) -> int:
        """This worker's own delayed copies on ``queue`` (retries, held-back
        releases) not seen since."""
        return len(self.retried.get(queue, ()))


def _note(tasks: set[str], task_id: str) -> None:
    if len(tasks) >= MAX_NOTED:
        tasks.pop()
    tasks.add(task_id)
