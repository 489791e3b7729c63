"""The attributes a task class sets itself, checked when the class is defined
(one TaskDefinitionError line naming the class and the attribute); what needs
the configuration waits for publish (docs/explanation/internals-top.md, "A task
class's attributes, checked when it is defined")."""
from __future__ import annotations

import math
import numbers
from typing import Any, Callable

from kale.exceptions import TaskDefinitionError
from kale.flow.spec import check_concurrency, check_key_method, read_rate
from kale.publish_checks import declared_problem
from kale.schedule_checks import (
    check_args,
    check_catch_up,
    check_every,
    check_kwargs,
    check_tz,
    has_cronsim,
    has_zone_database,
)


def check_attributes(cls: type) -> None:
    """Refuse a bad value of an attribute ``cls`` sets itself
    (TaskDefinitionError, one line naming the class and the attribute)."""
    own = vars(cls)
    name = '%s.%s' % (cls.__module__, cls.__qualname__)
    for attribute, check in CHECKS:
        if attribute in own:
            check(name, attribute, getattr(cls, attribute))


def _queue(name: str, attribute: str, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        _refuse(name, attribute, 'must be the name of a queue of the queue config', value)


def _time_limit(name: str, attribute: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not math.isfinite(value) or value <= 0:
        _refuse(name, attribute, 'must be a number of seconds above 0 (a float is fine)', value)


def _max_retries(name: str, attribute: str, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value < 0):
        _refuse(name, attribute, 'must be a whole number from 0 (0: never retry), or None',
                value)


def _unique_for_sec(name: str, attribute: str, value: Any) -> None:
    problem = declared_problem(name, value)
    if problem:
        raise TaskDefinitionError(problem)


def _schedule_tz(name: str, attribute: str, value: Any) -> None:
    try:
        check_tz(value)
    except ValueError as exc:
        # Where no zone database is installed every zone but UTC is unknown:
        # left to the scheduler, which says to install tzdata.
        if isinstance(value, str) and not has_zone_database():
            return
        raise TaskDefinitionError('task %s: %s %s' % (name, attribute, exc)) from None


def _field(check: Callable[[Any], Any]) -> Callable[[str, str, Any], None]:
    """A schedule field's check, its ValueError as TaskDefinitionError."""
    def checked(name: str, attribute: str, value: Any) -> None:
        try:
            check(value)
        except ValueError as exc:
            raise TaskDefinitionError('task %s: %s %s' % (name, attribute, exc)) from None
    return checked


def _refuse(name: str, attribute: str, accepted: str, value: Any) -> None:
    raise TaskDefinitionError('task %s: %s %s; got %r' % (name, attribute, accepted, value))


#: Each attribute checked, and its check: (class path, attribute, value).
CHECKS: tuple[tuple[str, Callable[[str, str, Any], Any]], ...] = (
    ('queue', _queue),
    ('time_limit', _time_limit),
    ('max_retries', _max_retries),
    ('rate_limit', lambda name, attribute, value: read_rate(name, value)),
    ('rate_limit_key', check_key_method),
    ('concurrency_limit', lambda name, attribute, value: check_concurrency(name, value)),
    ('concurrency_key', check_key_method),
    ('unique_for_sec', _unique_for_sec),
    # None: no schedule (a subclass may say so). Without cronsim (the schedules
    # extra), a cron expression's fields are counted; the scheduler parses it.
    ('schedule', _field(lambda every: every is None or check_every(every, cron=has_cronsim()))),
    ('schedule_tz', _schedule_tz),
    ('schedule_args', _field(check_args)),
    ('schedule_kwargs', _field(check_kwargs)),
    ('schedule_catch_up', _field(check_catch_up)),
)
