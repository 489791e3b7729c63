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
carries the count of unsettled deliveries so far (``Message.unsettled``).
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Optional

from kale.codec import get_codec
from kale.exceptions import KaleError
from kale.message import NUMBER_ATTRIBUTES, Message
from kale.transport import OutgoingMessage, ReceivedMessage
from kale.worker.batch import Batch, Outcome, Settlement

logger = logging.getLogger(__name__)


def unsettled_deliveries(received: ReceivedMessage, message: Message) -> int:
    """Deliveries of this task that ended with nobody settling it: those of
    earlier copies, and this copy's receives before this one."""
    return message.unsettled + received.receive_count - 1


def release_copy(received: ReceivedMessage) -> OutgoingMessage:
    """The fresh copy that releases an unstarted message: the same body, unless
    it was received before unsettled; then the copy carries that count, so
    that releasing it hides nothing."""
    if received.receive_count > 1:
        try:
            codec = get_codec()
            message = codec.decode(received.body)
            return codec.to_outgoing(dataclasses.replace(
                message, unsettled=unsettled_deliveries(received, message)))
        except KaleError:
            pass                    # sent back as it came: its count starts again
    attributes = {name: int(value) if name in NUMBER_ATTRIBUTES and value.isdigit() else value
                  for name, value in received.attributes.items()}
    return OutgoingMessage(received.body, attributes)


def release(batch: Batch, received: ReceivedMessage, reason: str) -> Settlement:
    """Settle an unstarted message as a release (its copy is made when settling)."""
    message = batch.decoded[received.message_id][0] if received.message_id in batch.decoded \
        else None
    return Settlement(received, Outcome.RELEASE, message=message, reason=reason)


def isolate_suspect(batch: Batch, who: str = 'worker') -> Optional[Batch]:
    """Take the suspect to run alone out of ``batch``, as a batch of its own.

    The suspect left unsettled most often is chosen; the batch's other
    suspects are settled as releases, to run alone in later batches. Returns
    None when the batch holds no suspect.
    """
    suspects = []
    for received in batch.unsettled():
        if received.message_id in batch.decoded:
            count = unsettled_deliveries(received, batch.decoded[received.message_id][0])
            if count > 0:
                suspects.append((count, received))
    if not suspects:
        return None
    count, chosen = max(suspects, key=lambda pair: pair[0])
    for others_count, received in suspects:
        if received is not chosen:
            batch.settlements.append(release(
                batch, received, 'left unsettled %d times: waits to run alone' % others_count))
    batch.messages.remove(chosen)
    decoded = batch.decoded.pop(chosen.message_id)
    logger.warning('%s: task %s (%s) on %s was left unsettled by %d earlier deliveries (its '
                   'worker may have died); running it alone', who, decoded[0].task_id,
                   decoded[0].task_name, batch.queue.name, count)
    return Batch(batch.queue, [chosen], batch.received_at, decoded={chosen.message_id: decoded})
