"""Messages a worker died holding: those seen at more than one death run alone,
and one on its last receive is given back unrun (docs/explanation/internals-worker.md,
"Suspects: messages a worker died holding").
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Optional

from kale.codec import Codec
from kale.codec.pipeline import UNSETTLED, Frame
from kale.events import Outcome, Settlement
from kale.exceptions import KaleError
from kale.message import NUMBER_ATTRIBUTES, Message
from kale.transport import OutgoingMessage, ReceivedMessage
from kale.worker.batch import Batch, Opened

logger = logging.getLogger(__name__)


#: Seconds SQS's clock (which stamps a message's first receive) may be ahead
#: of this machine's: a delivery held to the end of its visibility timeout is
#: still counted as held.
CLOCK_SKEW_SEC = 1.0

#: Deaths (deliveries nobody settled) after which a message runs alone: a
#: task seen at more than one death is the likely killer.
ALONE_AFTER = 2

#: Why a message on its last receive was given back unrun.
LAST_RECEIVE = 'on its last receive before the dead-letter queue: given back, to start its ' \
               'receive count anew'


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
    """Deliveries of this task that ended with nobody settling it: ``earlier`` ones (of
    copies before this one), and this copy's :func:`held_deliveries`."""
    return earlier + held_deliveries(received, visibility_timeout_sec)


def _attributes(received: ReceivedMessage) -> dict[str, Any]:
    return {name: int(value) if name in NUMBER_ATTRIBUTES and value.isdigit() else value
            for name, value in received.attributes.items()}


def release_copy(received: ReceivedMessage, queue: str, codec: Codec,
                 envelope: Optional[Frame] = None,
                 visibility_timeout_sec: Optional[float] = None) -> OutgoingMessage:
    """The fresh copy that releases an unstarted message received on ``queue``: a verified
    body resealed with the current key (never an old key's body unchanged), its payload not
    decoded, keeping its issue time and queue and counting the deliveries nobody settled,
    so that releasing hides nothing; one that does not verify, as it came (dead-lettered
    when run)."""
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


def delayed_release(batch: Batch, received: ReceivedMessage, envelope: Optional[Frame],
                    codec: Codec, delay_sec: int, reason: str, outcome: Outcome = Outcome.RELEASE,
                    message: Optional[Message] = None) -> Settlement:
    """An unstarted message back in ``delay_sec``: its delayed release copy, or on a
    FIFO queue, which cannot delay a copy, the message held invisible as long."""
    settlement = Settlement(received, outcome, message=message, envelope=envelope, reason=reason)
    if batch.fifo:
        settlement.hold_sec = delay_sec
    else:
        settlement.copy = dataclasses.replace(release_copy(
            received, batch.sqs_name, codec, envelope, batch.queue.visibility_timeout_sec),
            delay_sec=delay_sec)
    return settlement


def release(batch: Batch, received: ReceivedMessage, reason: str) -> Settlement:
    """Settle an unstarted message as a release (its copy is made when settling)."""
    opened = batch.opened.get(received.message_id)
    return Settlement(received, Outcome.RELEASE, reason=reason,
                      message=opened.message if opened else None,
                      envelope=opened.envelope if opened else None)


def group_cap(rounds: int) -> int:
    """The most messages a worker may hold while it holds a message left
    unsettled ``rounds`` times (itself included): 1 from ``ALONE_AFTER``
    deaths on, else 0 (no bound: it is no suspect)."""
    return 1 if rounds >= ALONE_AFTER else 0


@dataclasses.dataclass(frozen=True)
class Suspect:
    """A message of a batch left unsettled before, or on its last receive."""

    received: ReceivedMessage
    rounds: int         # deliveries that ended with nobody settling it
    cap: int            # the most messages its worker may hold meanwhile (itself included)
    #: On its last receive before SQS's redrive policy dead-letters it, and
    #: not yet left unsettled often enough to run alone: a death now, its
    #: own doing or not, would dead-letter it, so it is given back unrun (a
    #: fresh copy starts its receive count anew; its rounds go on).
    last: bool = False


#: Receives before the redrive policy's last one that count as the last: a
#: delivery can lapse unrun (a batch received just before an outage, its
#: copies not sent before its deadline) and use a receive no worker sees, so
#: a message held beside a killer is given back one receive early. A chaos
#: run (MAX_RECEIVE_COUNT 4, kills and outages) dead-lettered an innocent
#: whose third receive died with the killer and whose fourth lapsed.
LAST_RECEIVES_SLACK = 1


def near_redrive(count: int, redrive_after: int) -> bool:
    """Whether a message received ``count`` times is on its last receive
    before the redrive policy (``redrive_after``: its maxReceiveCount, 0 for
    none), or within LAST_RECEIVES_SLACK of it; never on a first receive."""
    return redrive_after > 0 and count > 1 and count >= redrive_after - LAST_RECEIVES_SLACK


def suspects_of(batch: Batch, redrive_after: int = 0) -> list[Suspect]:
    """The batch's suspects (``redrive_after``: the redrive policy's maxReceiveCount,
    0 for none), the most bound first; none on a FIFO queue."""
    if batch.fifo or (not batch.may_hold_suspect and batch.task_ids):
        return []       # (verified: no message was delivered or left unsettled before)
    found = []
    opened_by_id = batch.opened
    for received in batch.unsettled():
        opened = opened_by_id.get(received.message_id)
        suspect = None if opened is None else _suspect(batch, received, opened, redrive_after)
        if suspect is not None:
            found.append(suspect)
    found.sort(key=most_bound)
    return found


def _suspect(batch: Batch, received: ReceivedMessage, opened: Opened,
             redrive_after: int) -> Optional[Suspect]:
    """The message as a suspect, or None when it is none."""
    count = received.receive_count
    rounds = 0
    # A first receive of a task never left unsettled is the usual case:
    # its envelope says 0 (a header, read without building the count).
    if count > 1 or opened.message is not None or \
            opened.envelope.headers.get(UNSETTLED, '0') != '0':
        rounds = unsettled_deliveries(received, opened.unsettled,
                                      batch.queue.visibility_timeout_sec)
    cap = group_cap(rounds)
    last = cap != 1 and near_redrive(count, redrive_after)
    if last:
        cap = 1
    return Suspect(received, rounds, cap, last) if cap else None


def most_bound(suspect: Suspect) -> tuple[bool, int, int, int]:
    """How a suspect sorts: those on their last receive at the end, then the
    smallest cap first, the one left unsettled most often, the one received
    most often (were it given back, its count would start anew and a killer
    would reach the dead-letter queue later); ties in the batch's order."""
    return (suspect.last, suspect.cap, -suspect.rounds, -suspect.received.receive_count)


def log_suspects(who: str, batch: Batch, suspects: list[Suspect], cap: int) -> None:
    """One line for the suspects of ``batch`` that run: which, and their cap."""
    named = []
    for suspect in suspects[:3]:
        opened = batch.opened.get(suspect.received.message_id)
        named.append('%s (%s) %d times' % (opened.task_id, opened.task_class.task_path(),
                                           suspect.rounds) if opened is not None
                     else suspect.received.message_id)
    logger.warning('%s: %d task(s) on %s were left unsettled by earlier deliveries (their worker '
                   'may have died): %s%s; they run with at most %d message(s) held', who,
                   len(suspects), batch.queue.name, ', '.join(named),
                   ', ...' if len(suspects) > 3 else '', cap)
