"""The fields of a schedule (a cron expression or interval, a time zone,
arguments, a catch-up policy), checked without any configuration, for
:mod:`kale.task_checks` and :mod:`kale.schedules.spec`: each returns the value as
kept, or raises a one-line ValueError the caller prefixes with the field's name."""
from __future__ import annotations

import datetime
import math
from typing import Any, Mapping, Union

from kale.exceptions import ScheduleError

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
