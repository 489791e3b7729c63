"""Delays and due times: what ``publish`` accepts, and what a long wait asks of SQS.

SQS delays a message at most 15 minutes (:data:`~kale.transport.MAX_DELAY_SEC`).
A task due later than that (``delay_sec`` up to 365 days, or an ``eta``) is
sent with SQS's longest delay and its due time in its signed envelope; each
time it arrives before that time, a worker sends it again with the time
still to wait (15 minutes at most again) and deletes the copy it received
(:mod:`kale.worker.waiting`). It does not run, counts as no retry, and is
never refused for its age while it waits (:mod:`kale.codec.policy`).
"""
from __future__ import annotations

import datetime
import math
import numbers
from typing import Any, Optional

from kale.exceptions import InvalidDelayError
from kale.transport import MAX_DELAY_SEC

#: The longest wait publish accepts: 365 days.
MAX_WAIT_SEC = 365 * 24 * 3600

#: A task that arrives this little before its due time runs: the clocks of
#: its publisher and of the worker may differ by that much.
DUE_SLACK_SEC = 1.0


def _eta_wait(task_name: str, delay_sec: Any, eta: Any, now: float) -> float:
    """The seconds from ``now`` until ``eta`` (0 when it is past); InvalidDelayError when
    ``delay_sec`` is given as well or ``eta`` is not a timezone-aware datetime within 365 days."""
    if not (isinstance(delay_sec, numbers.Real) and not isinstance(delay_sec, bool)
            and delay_sec == 0):
        raise InvalidDelayError('task %s: give delay_sec or eta, not both (got delay_sec=%r '
                                'and eta=%r)' % (task_name, delay_sec, eta))
    if not isinstance(eta, datetime.datetime) or eta.utcoffset() is None:
        raise InvalidDelayError('task %s: eta must be a timezone-aware datetime (e.g. '
                                'datetime.now(timezone.utc) + timedelta(days=1)), got %r'
                                % (task_name, eta))
    wait = eta.timestamp() - now
    if wait > MAX_WAIT_SEC:
        raise InvalidDelayError('task %s: eta %s is more than 365 days away'
                                % (task_name, eta.isoformat()))
    return max(wait, 0.0)


def _delay_wait(task_name: str, delay_sec: Any) -> float:
    """``delay_sec`` as seconds; InvalidDelayError unless it is a number within 0..365 days."""
    if isinstance(delay_sec, bool) or not isinstance(delay_sec, numbers.Real) \
            or math.isnan(delay_sec) or not 0 <= float(delay_sec) <= MAX_WAIT_SEC:
        raise InvalidDelayError('task %s: delay_sec must be a number of seconds within '
                                '0..%d (365 days), got %r' % (task_name, MAX_WAIT_SEC,
                                                              delay_sec))
    return float(delay_sec)


def check_wait(task_name: str, delay_sec: Any = 0, eta: Any = None,
               now: float = 0.0) -> tuple[int, Optional[float]]:
    """The SQS delay to send a task with (whole seconds, 0..900) and its due
    time (epoch seconds; None when SQS's own delay covers the wait), from
    ``delay_sec`` (0..365 days) or ``eta`` (a timezone-aware datetime; one in
    the past runs now), at ``now``. InvalidDelayError, one line naming the
    task, for anything else."""
    if eta is not None:
        wait = _eta_wait(task_name, delay_sec, eta, now)
    else:
        wait = _delay_wait(task_name, delay_sec)
    if wait <= MAX_DELAY_SEC:
        return int(math.ceil(wait)), None
    return MAX_DELAY_SEC, now + wait


def remaining_delay(due_at: float, now: float) -> int:
    """The SQS delay of the copy of a task due at ``due_at`` that arrived at
    ``now``, early: the time still to wait, rounded up, 15 minutes at most."""
    return int(min(MAX_DELAY_SEC, max(1, math.ceil(due_at - now))))


def arrived_early(due_at: float, now: float) -> bool:
    """Whether a task due at ``due_at`` (0: no due time) must wait still at ``now``."""
    return bool(due_at) and now < due_at - DUE_SLACK_SEC


def check_delay(task_name: str, delay_sec: Any) -> int:
    """``delay_sec`` as whole seconds for SQS's own delay (0..900, rounded up),
    or InvalidDelayError (a retry's or a release's delay; publish takes longer
    ones, see :func:`check_wait`)."""
    if isinstance(delay_sec, bool) or not isinstance(delay_sec, numbers.Real) \
            or math.isnan(delay_sec) or not 0 <= float(delay_sec) <= MAX_DELAY_SEC:
        raise InvalidDelayError('task %s: delay_sec must be a number of seconds within 0..%d, '
                                'got %r' % (task_name, MAX_DELAY_SEC, delay_sec))
    return int(math.ceil(delay_sec))
