"""Messages a worker died holding: run them alone, and keep count.

A receive count above 1 means a worker received the message before and
never settled it (releases are fresh copies, see :mod:`kale.worker.consumer`): it
died, perhaps killed by that very message (out of memory, a crash in native
code, ``os._exit``). Such a *suspect* runs alone, after everything else the
worker holds has been settled, so a message that kills its worker takes no
other message down with it. Only its own receive count grows, until SQS's
redrive policy moves it to the dead-letter queue after ``MAX_RECEIVE_COUNT``
receives; its neighbours are never pushed there with it.

A message re-sent as a fresh copy starts a new receive count, so the copy
carries the count of unsettled deliveries so far, in its signed envelope.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Optional

from kale.codec import Codec
from kale.codec.pipeline import UNSETTLED, Frame
from kale.events import Outcome, Settlement
from kale.exceptions import KaleError
from kale.message import NUMBER_ATTRIBUTES
from kale.transport import OutgoingMessage, ReceivedMessage
from kale.worker.batch import Batch

logger = logging.getLogger(__name__)


#: Seconds SQS's clock (which stamps a message's first receive) may be ahead
#: of this machine's: a delivery held to the end of its visibility timeout is
#: still counted as held.
CLOCK_SKEW_SEC = 1.0


def held_deliveries(received: ReceivedMessage, visibility_timeout_sec: Optional[float]) -> int:
    """How many earlier receives of this copy were held to the end of their
    visibility timeout, nobody settling them: a worker died holding it, or
    lost the endpoint. A receive that gave the message back sooner (a console
    poll with visibility 0, a visibility change to 0) is not counted: each
    held receive took a whole visibility timeout, so there were at most as
    many as fit in the time since the first receive. Without that time (or
    the timeout) every earlier receive counts."""
    earlier = received.receive_count - 1
    since = received.since_first_receive_sec
    if earlier <= 0 or since is None or not visibility_timeout_sec:
        return max(earlier, 0)
    return min(earlier, int((since + CLOCK_SKEW_SEC) // visibility_timeout_sec))


def unsettled_deliveries(received: ReceivedMessage, earlier: int,
                         visibility_timeout_sec: Optional[float] = None) -> int:
    """Deliveries of this task that ended with nobody settling it: ``earlier``
    ones (of copies before this one), and this copy's held receives before
    this one (see :func:`held_deliveries`)."""
    return earlier + held_deliveries(received, visibility_timeout_sec)


def _attributes(received: ReceivedMessage) -> dict[str, Any]:
    return {name: int(value) if name in NUMBER_ATTRIBUTES and value.isdigit() else value
            for name, value in received.attributes.items()}


def release_copy(received: ReceivedMessage, queue: str, codec: Codec,
                 envelope: Optional[Frame] = None,
                 visibility_timeout_sec: Optional[float] = None) -> OutgoingMessage:
    """The fresh copy that releases an unstarted message received on ``queue``.

    A verified body is sent back signed with the current key (never an old
    key's body unchanged), keeping its issue time and queue, and counting the
    deliveries nobody settled, so that releasing it hides nothing; its payload
    is not decoded. A body that does not verify goes back as it came, to be
    dead-lettered when it is run.
    """
    try:
        if envelope is None:
            envelope = codec.open(received.body, queue, check_age=False)
        if envelope.legacy:         # re-encode in the current format
            message = codec.read(envelope)
            fresh = dataclasses.replace(message, unsettled=unsettled_deliveries(
                received, message.unsettled, visibility_timeout_sec))
            return codec.to_outgoing(fresh, queue)
        unsettled = str(unsettled_deliveries(received, envelope.unsettled,
                                             visibility_timeout_sec))
        attributes = envelope.message_attributes()
        attributes.update(_attributes(received))        # what was received, if anything
        return OutgoingMessage(codec.reseal(envelope, **{UNSETTLED: unsettled}), attributes)
    except KaleError:
        pass                        # sent back as it came
    return OutgoingMessage(received.body, _attributes(received))


def release(batch: Batch, received: ReceivedMessage, reason: str) -> Settlement:
    """Settle an unstarted message as a release (its copy is made when settling)."""
    opened = batch.opened.get(received.message_id)
    return Settlement(received, Outcome.RELEASE, reason=reason,
                      message=opened.message if opened else None,
                      envelope=opened.envelope if opened else None)


def isolate_suspect(batch: Batch, who: str = 'worker') -> Optional[Batch]:
    """Take the suspect to run alone out of ``batch``, as a batch of its own.

    The suspect left unsettled most often is chosen; the batch's other
    suspects are settled as releases, to run alone in later batches. Returns
    None when the batch holds no suspect. On a FIFO queue, where a receive
    count above 1 is an ordinary retry and order matters, there are none.
    """
    if batch.fifo or (not batch.may_hold_suspect and batch.task_ids):
        return None         # (verified: no message was delivered or left unsettled before)
    suspects = _suspects(batch)
    if not suspects:
        return None
    count, chosen = max(suspects, key=lambda pair: pair[0])
    for others_count, received in suspects:
        if received is not chosen:
            batch.settlements.append(release(
                batch, received, 'left unsettled %d times: waits to run alone' % others_count))
    batch.messages.remove(chosen)
    opened = batch.opened.pop(chosen.message_id)
    logger.warning('%s: task %s (%s) on %s was left unsettled by %d earlier deliveries (its '
                   'worker may have died); running it alone', who, opened.envelope.task_id,
                   opened.task_class.task_path(), batch.queue.name, count)
    return Batch(batch.queue, [chosen], batch.received_at, batch.sqs_name,
                 opened={chosen.message_id: opened})


def _suspects(batch: Batch) -> list[tuple[int, ReceivedMessage]]:
    """The batch's unsettled messages left unsettled before, each with how often."""
    suspects = []
    opened_by_id = batch.opened
    for received in batch.unsettled():
        opened = opened_by_id.get(received.message_id)
        # A first receive of a task never left unsettled is the usual case:
        # its envelope says 0 (a header, read without building the count).
        if opened is not None and (received.receive_count > 1 or opened.message is not None
                                   or opened.envelope.headers.get(UNSETTLED, '0') != '0'):
            count = unsettled_deliveries(received, opened.unsettled,
                                         batch.queue.visibility_timeout_sec)
            if count > 0:
                suspects.append((count, received))
    return suspects


def isolate_long(batch: Batch) -> Optional[Batch]:
    """Take the first task whose ``time_limit`` is longer than the queue's
    visibility timeout out of ``batch``, to run alone while a heartbeat keeps
    its message invisible (see :mod:`kale.worker.heartbeat`). The batch's
    other long tasks are released, each to run alone in a later batch.

    On a FIFO queue the long task runs after the rest of the batch, so the
    messages of its group after it are released; it shares the batch's held
    groups, and is released itself if an earlier task of its group fails."""
    chosen: Optional[ReceivedMessage] = None
    for received in batch.unsettled():
        opened = batch.opened.get(received.message_id)
        if chosen is not None and batch.fifo and received.group_id == chosen.group_id:
            batch.settlements.append(release(
                batch, received, 'an earlier task of group %r runs alone first'
                                 % received.group_id))
        elif opened is None or not batch.is_long(opened.task_class.time_limit):
            continue
        elif chosen is None:
            chosen = received
        else:
            batch.settlements.append(release(
                batch, received, 'time_limit %gs is longer than the visibility timeout: '
                                 'waits to run alone' % opened.task_class.time_limit))
    if chosen is None:
        return None
    batch.messages.remove(chosen)
    batch.alone_group = chosen.group_id if batch.fifo else None
    opened = batch.opened.pop(chosen.message_id)
    return Batch(batch.queue, [chosen], batch.received_at, batch.sqs_name,
                 opened={chosen.message_id: opened}, held_groups=batch.held_groups)
