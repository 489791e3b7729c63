"""The replay and acceptance checks, on signed headers, before any decoding:
``expired``, ``wrong_queue`` and ``serializer_not_accepted``
(docs/explanation/internals-transport.md, "The replay checks", and
docs/explanation/security.md).
"""
from __future__ import annotations

import math
import time
from typing import Callable, Collection

from kale.codec.pipeline import DUE_AT, PUBLISHED_AT, QUEUE, SERIALIZER, Frame
from kale.codec.serialize import SERIALIZER_NAMES
from kale.exceptions import DecodeError
from kale.transport import MAX_DELAY_SEC


class PolicyStep:
    """Binds bodies to their queue; refuses expired, misdirected and unaccepted ones before decoding."""

    name = 'policy'

    def __init__(self, max_age_sec: float, accept_serializers: Collection[str],
                 clock: Callable[[], float] = time.time):
        self.max_age_sec = max_age_sec
        self.accept_serializers = frozenset(accept_serializers)
        self.clock = clock

    def encode(self, frame: Frame) -> None:
        frame.headers[QUEUE] = frame.queue

    def decode(self, frame: Frame) -> None:
        serializer = SERIALIZER_NAMES.get(frame.headers.get(SERIALIZER, ''), '')
        if serializer not in self.accept_serializers:
            raise _not_accepted(serializer, frame, self.accept_serializers)
        if frame.legacy:
            return
        try:
            published = float(frame.headers[PUBLISHED_AT])
            signed_for = frame.headers[QUEUE]
        except (KeyError, ValueError) as exc:
            raise DecodeError(DecodeError.CORRUPT, 'envelope lacks a valid publish time or queue') from exc
        since = published
        due = frame.headers.get(DUE_AT)
        if due is not None:             # a long wait: counted from its last stretch
            since = max(published, _due_time(due) - MAX_DELAY_SEC)
        age = self.clock() - since
        if frame.check_age and age > self.max_age_sec:
            raise _expired(age, since != published, self.max_age_sec)
        if frame.queue and signed_for != frame.queue and signed_for not in frame.topics:
            raise _wrong_queue(signed_for, frame.queue)


def _not_accepted(serializer: str, frame: Frame, accepted: Collection[str]) -> DecodeError:
    """The refusal of a body whose serializer (its name, else its header) is not accepted."""
    return DecodeError(DecodeError.SERIALIZER_NOT_ACCEPTED, 'serializer %r is not in ACCEPT_SERIALIZERS %s'
                       % (serializer or frame.headers.get(SERIALIZER, ''), sorted(accepted)))


def _expired(age: float, waited: bool, max_age_sec: float) -> DecodeError:
    """The refusal of a body ``age`` seconds old, counted from its publish or, for a
    task that ``waited`` past SQS's delay, from 15 minutes before its due time."""
    if not waited:
        return DecodeError(DecodeError.EXPIRED, 'published %.0f s ago, over '
                           'MESSAGE_MAX_AGE_SEC of %g s' % (age, max_age_sec))
    return DecodeError(DecodeError.EXPIRED, 'due %.0f s ago, over MESSAGE_MAX_AGE_SEC of %g s from 15 '
                       'minutes before its due time' % (age - MAX_DELAY_SEC, max_age_sec))


def _wrong_queue(signed_for: str, queue: str) -> DecodeError:
    """The refusal of a body signed for a queue or topic other than ``queue``."""
    return DecodeError(DecodeError.WRONG_QUEUE, 'signed for %s %r, received on %r'
                       % ('topic' if signed_for.startswith('topic:') else 'queue', signed_for, queue))


def _due_time(text: str) -> float:
    """A signed due time header's epoch seconds (CORRUPT when it is not one)."""
    try:
        due_at = float(text)
    except ValueError:
        due_at = math.nan
    if not math.isfinite(due_at):
        raise DecodeError(DecodeError.CORRUPT, 'envelope has a due time %r that is not one' % text[:40])
    return due_at
