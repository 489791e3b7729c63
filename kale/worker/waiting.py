"""Tasks that arrive before their due time: sent on, unrun.

A task published to wait longer than SQS's 15-minute delay carries its due
time in its signed envelope (:mod:`kale.delays`). When a copy arrives
earlier than that, the worker does not run it: it settles it as
:attr:`~kale.events.Outcome.WAITING`, with a copy of the same envelope
(same task id, publish time and counts; resealed with the current key and
counting unsettled deliveries, as a release copy is) delayed by the time
still to wait, 15 minutes at most. Settling sends that copy, then deletes
the one received (:mod:`kale.worker.consumer`), so a crash between the two
leaves two copies, never none. It is no retry and no failure, and its
record stays ``scheduled``. A cancelled task is settled as cancelled
before this step (:mod:`kale.worker.cancelled`), so it is deleted instead.

Not on a FIFO queue, which cannot delay a message (publishing there refuses
a wait).

A burst worker (:class:`WaitingCopies`) does not wait for the copies it
sent on: once the only delayed messages of its queues are those, it is done.
"""
from __future__ import annotations

import dataclasses
import datetime

from kale.codec import Codec
from kale.delays import arrived_early, remaining_delay
from kale.events import Outcome, Settlement
from kale.worker.batch import Batch
from kale.worker.suspects import release_copy


def due_text(due_at: float) -> str:
    """A due time for log lines and reasons: ISO 8601, UTC, to the second."""
    return datetime.datetime.fromtimestamp(due_at, datetime.timezone.utc).strftime(
        '%Y-%m-%dT%H:%M:%SZ')


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
        copy = release_copy(received, batch.sqs_name, codec, envelope,
                            batch.queue.visibility_timeout_sec)
        batch.settlements.append(Settlement(
            received, Outcome.WAITING, envelope=envelope, message=opened.message,
            copy=dataclasses.replace(copy, delay_sec=remaining_delay(due_at, now)),
            reason='due at %s' % due_text(due_at)))
        count += 1
    return count


class WaitingCopies:
    """The tasks a worker sent on as waiting and has not seen since, by
    queue: a burst is done when the only delayed messages left are those."""

    def __init__(self) -> None:
        self.by_queue: dict[str, set[str]] = {}

    def settled(self, queue: str, s: Settlement) -> None:
        """Note one settled message: a waiting copy sent, or the task seen again."""
        if s.outcome is Outcome.WAITING and s.settled:
            self.by_queue.setdefault(queue, set()).add(s.task_id)
        elif self.by_queue.get(queue):
            self.by_queue[queue].discard(s.task_id)

    def count(self, queue: str) -> int:
        return len(self.by_queue.get(queue, ()))
