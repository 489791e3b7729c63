"""The attributes a task class sets itself, checked when the class is defined
(one TaskDefinitionError line naming the class and the attribute; what needs the
configuration waits for publish), and a schedule's fields, checked without any
configuration, for this and :mod:`kale.schedules.spec`: each returns the value as kept,
or a one-line ValueError the caller prefixes with the field's name
(docs/explanation/internals-top.md, "A task class's attributes, checked when it is defined")."""
from __future__ import annotations

import datetime
import math
import numbers
from typing import Any, Callable, Mapping, Union

from kale.exceptions import ScheduleError, TaskDefinitionError
from kale.flow.spec import check_concurrency, check_key_method, read_rate
from kale.publish_checks import declared_problem


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


#: What a scheduler does with ticks that came while no scheduler led.
CATCH_UP = ('last', 'all', 'none')

UTC = datetime.timezone.utc


def cronsim_module() -> Any:
    """cronsim (ScheduleError when the ``schedules`` extra is not installed)."""
    try:
        import cronsim
    except ImportError:
        raise ScheduleError('cron schedules need cronsim: pip install "kale-sqs[schedules]"') \
            from None
    return cronsim


def has_cronsim() -> bool:
    """Whether cronsim can be imported."""
    try:
        cronsim_module()
    except ScheduleError:
        return False
    return True


def zone(name: str) -> datetime.tzinfo:
    """The time zone called ``name`` (UTC as the fixed zone, which has no
    daylight-saving time to handle); ValueError for an unknown one."""
    if name == 'UTC':
        return UTC
    import zoneinfo
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError) as exc:
        raise ValueError(str(exc) or name) from None


def has_zone_database() -> bool:
    """Whether any IANA zone can be found (the system's database or tzdata)."""
    import zoneinfo
    return bool(zoneinfo.available_timezones())


def check_every(every: Any, cron: bool = True) -> Union[str, int]:
    """A five-field cron expression cronsim accepts, or whole seconds >= 1
    (with ``cron`` off, the fields are counted but not parsed)."""
    if isinstance(every, str):
        if len(every.split()) != 5:
            raise ValueError('%r is not a five-field cron expression (minute hour day-of-month '
                             'month day-of-week)' % (every,))
        if cron:
            cronsim = cronsim_module()
            try:
                cronsim.CronSim(every, datetime.datetime(2000, 1, 1, tzinfo=UTC))
            except cronsim.CronSimError as exc:
                raise ValueError('%r is not a valid cron expression: %s' % (every, exc)) \
                    from None
        return every
    if isinstance(every, bool) or not isinstance(every, (int, float)) \
            or not math.isfinite(every) or every != int(every) or every < 1:
        raise ValueError('must be a five-field cron string or whole seconds of at least 1, '
                         'got %r' % (every,))
    return int(every)


def check_tz(tz: Any) -> str:
    """An IANA time zone name of the system's zone database (or tzdata's)."""
    if not isinstance(tz, str):
        raise ValueError('must be an IANA time zone name, got %r' % (tz,))
    try:
        zone(tz)
    except ValueError:
        raise ValueError("%r is not a known IANA time zone name (e.g. 'Europe/Paris'; pip "
                         'install tzdata where the system has no zone database)' % (tz,)) \
            from None
    return tz


def check_args(args: Any) -> tuple:
    if not isinstance(args, (list, tuple)):
        raise ValueError('must be a list, got %r' % (args,))
    return tuple(args)


def check_kwargs(kwargs: Any) -> dict[str, Any]:
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise ValueError('must be a dict of names to values, got %r' % (kwargs,))
    return dict(kwargs)


def check_catch_up(catch_up: Any) -> str:
    if catch_up not in CATCH_UP:
        raise ValueError('must be one of %s, got %r' % (', '.join(map(repr, CATCH_UP)),
                                                        catch_up))
    return str(catch_up)


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
