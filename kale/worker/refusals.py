"""Settlements for messages that cannot run: dead letters of bodies kept
verbatim, and releases of messages whose payload S3 did not give back."""
from __future__ import annotations

import logging
from typing import Any, Optional

from kale.codec import Codec
from kale.codec.pipeline import Frame
from kale.events import Outcome, Settlement
from kale.exceptions import DecodeError, PayloadStoreError
from kale.message import ATTR_DEAD_LETTER_REASON, ATTR_SOURCE_QUEUE, Message
from kale.queue_config import TaskQueue
from kale.transport import OutgoingMessage, ReceivedMessage
from kale.worker.batch import Batch
from kale.worker.suspects import delayed_release

logger = logging.getLogger('kale.worker.runner')

MAX_REASON_CHARS = 256
#: Delay of the copy that releases a message whose payload S3 did not give
#: back, so that an outage is not a busy loop.
PAYLOAD_RETRY_DELAY_SEC = 30


def verbatim_dead_letter(received: ReceivedMessage, queue: TaskQueue, reason: str,
                         message: Optional[Message] = None,
                         exception: Optional[BaseException] = None,
                         envelope: Optional[Frame] = None) -> Settlement:
    """Dead-letter the body exactly as received (it could not be decoded or
    re-encoded), with the task's attributes when its envelope verified, so
    operators see which task it was."""
    attributes: dict[str, Any] = dict(received.attributes, **{
        ATTR_DEAD_LETTER_REASON: reason[:MAX_REASON_CHARS], ATTR_SOURCE_QUEUE: queue.name})
    if envelope is not None:
        try:
            attributes = dict(envelope.message_attributes(), **attributes)
        except ValueError:          # a signed but malformed count: the reason says so
            pass
    copy = OutgoingMessage(received.body, attributes)
    return Settlement(received, Outcome.DEAD_LETTER, message=message, copy=copy, reason=reason,
                      exception=exception, envelope=envelope)


def refused(batch: Batch, received: ReceivedMessage, exc: DecodeError,
             envelope: Optional[Frame] = None) -> Settlement:
    logger.error('message %r on queue %s cannot be handled: %s', received.message_id,
                 batch.queue.name, exc, extra={'queue': batch.queue.name})
    return verbatim_dead_letter(received, batch.queue, str(exc), envelope=envelope)


def payload_not_fetched(batch: Batch, received: ReceivedMessage, envelope: Frame,
                         exc: PayloadStoreError, codec: Codec) -> Settlement:
    """Release a message whose payload S3 did not give back (not the message's
    fault) for PAYLOAD_RETRY_DELAY_SEC."""
    logger.error('task %s (%s): payload not fetched from S3, released for %d s: %s',
                 envelope.task_id, envelope.task_name, PAYLOAD_RETRY_DELAY_SEC, exc)
    return delayed_release(batch, received, envelope, codec, PAYLOAD_RETRY_DELAY_SEC,
                           'payload not fetched: %s' % exc)
