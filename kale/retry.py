"""What a failed run leads to: retried after a delay, or stopped for good
(:class:`RetryPolicy`; ``Retry(after=...)`` and ``retry_after_sec``:
docs/explanation/internals-top.md, "Retries"), its reason as one line, and the
:class:`Backoff` of a request to SQS that failed (an outage, throttling)."""
from __future__ import annotations

import dataclasses
import math
import random
from typing import TYPE_CHECKING, Callable, Optional

from kale.exceptions import ChildTaskError, Retry, describe
from kale.transport import MAX_DELAY_SEC

if TYPE_CHECKING:
    from kale.config import Config

#: Why a failure stops the task (the dead letter's reason starts with it).
PERMANENT_FAILURE_NON_RETRIABLE = 'non_retriable'
PERMANENT_FAILURE_NO_RETRIES = 'no_retries'
PERMANENT_FAILURE_RETRIES_EXHAUSTED = 'retries_exhausted'


def without_message(reason: str, exc: Optional[BaseException]) -> str:
    """A failure's reason with its exception named by type alone: ``ValueError``
    for ``ValueError: refused card ...``, ``no_retries: ValueError`` for a
    dead letter's (what may be logged where task data is encrypted)."""
    if exc is not None:
        full = describe(exc)
        if full in reason:
            return reason.replace(full, type(exc).__name__)
    return short_reason(reason)


def short_reason(reason: str) -> str:
    """A failure's reason without the error's message: ``no_retries:
    ValueError`` of ``no_retries: ValueError: refused card ...`` (what is
    kept in clear where task data is encrypted)."""
    return ': '.join(reason.split(': ')[:2])


def child_stand_in(exc: BaseException,
                   retriable: Callable[[BaseException], bool]) -> BaseException:
    """What a task's child process sends back for an exception that does not
    pickle: a ChildTaskError describing it (and whether it may retry); for a
    Retry, the Retry with its cause so described (httpx's errors do not pickle)."""
    if isinstance(exc, Retry) and exc.exc is not None:
        return Retry(exc.after, ChildTaskError(describe(exc.exc), retriable(exc.exc)))
    return ChildTaskError(describe(exc), retriable(exc))


def requested_delay_sec(exc: Optional[BaseException]) -> Optional[float]:
    """The delay ``exc`` asks for: its ``retry_after_sec`` attribute when that
    is a number of seconds (not a bool, not NaN), else None."""
    asked = getattr(exc, 'retry_after_sec', None) if exc is not None else None
    if isinstance(asked, bool) or not isinstance(asked, (int, float)) or asked != asked:
        return None
    return float(asked)


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """Retries after the first failure, the exceptions that are never retried,
    and exponential delays: ``delay_multiple_sec * 2**retry_num``, at most
    ``max_delay_sec`` (and SQS's 900), spread by ``jitter`` either way."""

    max_retries: Optional[int] = 4
    non_retriable: tuple[type[BaseException], ...] = ()
    delay_multiple_sec: float = 60.0
    max_delay_sec: float = MAX_DELAY_SEC
    jitter: float = 0.0

    @classmethod
    def from_config(cls, config: 'Config', max_retries: Optional[int],
                    non_retriable: tuple[type[BaseException], ...] = ()) -> 'RetryPolicy':
        """A task's policy under ``config``'s RETRY_DELAY_MULTIPLE_SEC,
        SQS_MAX_TASK_DELAY_SEC and RETRY_DELAY_JITTER."""
        return cls(max_retries, non_retriable, float(config.RETRY_DELAY_MULTIPLE_SEC),
                   float(config.SQS_MAX_TASK_DELAY_SEC), float(config.RETRY_DELAY_JITTER or 0))

    def retriable(self, exc: BaseException) -> bool:
        """Whether a run that raised ``exc`` may be retried at all."""
        if isinstance(exc, ChildTaskError):
            return exc.retriable            # decided in the child, on the real exception
        return not isinstance(exc, self.non_retriable)

    def stop_reason(self, failure_num: int, exc: Optional[BaseException] = None
                    ) -> Optional[str]:
        """Why the failure of a run that had failed ``failure_num`` times
        before ends the task (see the PERMANENT_FAILURE_* names), or None to
        retry it. Without ``exc`` only the count is judged."""
        if exc is not None and not self.retriable(exc):
            return PERMANENT_FAILURE_NON_RETRIABLE
        if not self.max_retries:
            return PERMANENT_FAILURE_NO_RETRIES
        if failure_num >= self.max_retries:
            return PERMANENT_FAILURE_RETRIES_EXHAUSTED
        return None

    def delay_sec(self, retry_num: int,
                  uniform: Callable[[float, float], float] = random.uniform,
                  exc: Optional[BaseException] = None) -> int:
        """Whole seconds before retry number ``retry_num + 1`` runs, within
        SQS's 0..900: what ``exc`` asks for (:func:`requested_delay_sec`), or
        the exponential delay."""
        asked = requested_delay_sec(exc)
        if asked is not None:
            return int(math.ceil(min(max(asked, 0), MAX_DELAY_SEC)))
        delay = min(self.delay_multiple_sec * 2 ** min(retry_num, 30), self.max_delay_sec)
        if self.jitter:
            delay *= uniform(1 - self.jitter, 1 + self.jitter)
        return int(math.ceil(min(max(delay, 0), MAX_DELAY_SEC)))


#: One generator for every Backoff (seeding one costs a system call, and
#: settling makes a Backoff per request).
_shared_rng = random.Random()


class Backoff:
    """Delays that double from ``initial`` up to ``maximum`` seconds, with a
    little jitter so a fleet of workers does not retry in step."""

    def __init__(self, initial: float = 0.5, maximum: float = 30.0,
                 rng: Optional[random.Random] = None):
        self.initial = initial
        self.maximum = max(maximum, initial)
        self.failures = 0
        self._rng = rng or _shared_rng

    def next_delay(self) -> float:
        """The pause before the next attempt (and count one more failure)."""
        delay = min(self.initial * 2 ** min(self.failures, 30), self.maximum)
        self.failures += 1
        return delay * self._rng.uniform(0.8, 1.0)

    def reset(self) -> None:
        """The last attempt worked: start again from ``initial``."""
        self.failures = 0
