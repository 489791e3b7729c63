"""How many times the SQS transport makes one request (at most
:data:`REQUEST_ATTEMPTS`, a direct request being the first), and after which
failures: not a receive sent (:data:`TAKING`), which SQS may have applied.
docs/explanation/delivery-guarantees.md says it at length.
"""
from __future__ import annotations

import logging
import random
import time
from typing import Callable, Optional, TypeVar

import botocore.exceptions

from kale.transport.direct import ErrorAnswer

logger = logging.getLogger(__name__)

T = TypeVar('T')

#: The attempts of one request of a client Kale builds, in all: the first
#: and two retries (a receive whose answer did not come: the first only).
REQUEST_ATTEMPTS = 3

#: The pause before the second attempt; it doubles for each later one, with
#: up to half of it taken off at random so that workers do not retry in step.
FIRST_PAUSE_SEC = 0.25

#: Requests not made again once sent: what they did would be done again.
TAKING = frozenset({'ReceiveMessage'})

THROTTLING_CODES = frozenset({'Throttling', 'ThrottlingException', 'RequestThrottled',
                              'TooManyRequestsException', 'RequestLimitExceeded', 'SlowDown', 'KmsThrottled'})
#: Error codes of answers that say the request did not finish (botocore's
#: standard retry mode makes them again too).
TRANSIENT_CODES = frozenset({'RequestTimeout', 'RequestTimeoutException', 'PriorRequestNotComplete'})


def sent_nothing(exc: BaseException) -> bool:
    """Whether ``exc`` failed a request before anything reached the endpoint
    (not a read timeout, nor a connection closed on the answer)."""
    return isinstance(exc, botocore.exceptions.ConnectionError)


def unanswered(action: str, exc: BaseException) -> bool:
    """Whether ``exc`` left a request of ``action`` (:data:`TAKING`) sent without an answer read."""
    if action not in TAKING or sent_nothing(exc):
        return False
    return isinstance(exc, botocore.exceptions.HTTPClientError) \
        or (isinstance(exc, ErrorAnswer) and exc.status == 200)


def not_again(action: str, exc: BaseException) -> str:
    """What an error message adds when ``exc`` was :func:`unanswered`."""
    return ('; not made again, as it may have been applied: what it took comes back after its '
            'visibility timeout') if unanswered(action, exc) else ''


def again(action: str, exc: BaseException) -> bool:
    """Whether a request of ``action`` that failed with ``exc`` may be made again."""
    if sent_nothing(exc):
        return True
    if unanswered(action, exc):
        return False
    if isinstance(exc, (botocore.exceptions.HTTPClientError, ErrorAnswer)):
        return True         # an error answer is made again through botocore, which reads it
    if isinstance(exc, botocore.exceptions.ClientError):
        code, status, _ = error_of(exc)
        return status >= 500 or code in THROTTLING_CODES or code in TRANSIENT_CODES
    return False


def error_of(exc: botocore.exceptions.ClientError) -> tuple[str, int, str]:
    """The code, HTTP status and message of an error answer."""
    error = exc.response.get('Error', {})
    return (str(error.get('Code', '') or ''),
            exc.response.get('ResponseMetadata', {}).get('HTTPStatusCode', 0),
            str(error.get('Message', '') or ''))


class Attempts:
    """The attempts of one transport's requests: up to ``limit`` each."""

    def __init__(self, limit: int, sleep: Callable[[float], None] = time.sleep):
        self.limit = limit
        self.sleep = sleep

    def make(self, action: str, call: Callable[[], T],
             direct: Optional[Callable[[], Optional[T]]] = None) -> T:
        """The answer of ``call()`` (through botocore) made up to ``limit`` times,
        ``direct`` making the first attempt if it sends it; the last failure raised."""
        attempt = 1
        while True:
            try:
                if attempt == 1 and direct is not None:
                    answer = direct()
                    if answer is not None:
                        return answer
                return call()
            except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError, ErrorAnswer) as exc:
                if attempt >= self.limit or not again(action, exc):
                    raise
                logger.debug('%s: attempt %d of %d failed (%s: %s)', action, attempt, self.limit,
                             type(exc).__name__, exc)
            attempt += 1
            self.sleep(FIRST_PAUSE_SEC * 2 ** (attempt - 2) * random.uniform(0.5, 1.0))
