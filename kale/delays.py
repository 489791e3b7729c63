"""Delays and due times: what ``publish`` accepts, and what a wait longer than
SQS's 15 minutes asks of SQS (docs/explanation/internals-top.md, "Delays")."""
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
    """The seconds from ``now`` until ``eta`` (0 when past), or InvalidDelayError."""
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


def _seconds(task_name: str, delay_sec: Any, most: int, shown: str = '') -> float:
    """``delay_sec`` as seconds; InvalidDelayError unless it is a number within 0..``most``."""
    if isinstance(delay_sec, bool) or not isinstance(delay_sec, numbers.Real) \
            or math.isnan(delay_sec) or not 0 <= float(delay_sec) <= most:
        raise InvalidDelayError('task %s: delay_sec must be a number of seconds within 0..%d%s, '
                                'got %r' % (task_name, most, shown, delay_sec))
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
        wait = _seconds(task_name, delay_sec, MAX_WAIT_SEC, ' (365 days)')
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
    return int(math.ceil(_seconds(task_name, delay_sec, MAX_DELAY_SEC)))
