"""One schedule: what it runs, when, and the times of its ticks (epoch seconds;
cron and daylight-saving, intervals: docs/explanation/internals-workflow.md, "Ticks")."""
from __future__ import annotations

import dataclasses
import datetime
import hashlib
import math
import re
from typing import Any, Callable, Mapping, Optional, Union

from kale.exceptions import ScheduleError
from kale.task import Task
from kale.task_checks import check_args, check_catch_up, check_kwargs, check_tz, cronsim_module, zone
from kale.task_checks import check_every as _check_every

#: The most missed ticks ``catch_up = 'all'`` publishes (the latest ones).
CATCH_UP_ALL_MAX = 100
#: The label every scheduled run carries, naming its schedule.
SCHEDULE_LABEL = 'kale.schedule'
MAX_NAME_CHARS = 200


@dataclasses.dataclass(frozen=True)
class Schedule:
    """A task published at every tick of a cron expression or an interval."""

    #: The task's path for a class's own schedule; the key in SCHEDULES.
    name: str
    task_class: type[Task]
    #: A five-field cron expression, or whole seconds.
    every: Union[str, int]
    tz: str = 'UTC'
    args: tuple = ()
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    catch_up: str = 'last'
    #: A queue of the queue config other than the task's own.
    queue: Optional[str] = None

    @property
    def task_path(self) -> str:
        return self.task_class.task_path()

    @property
    def is_cron(self) -> bool:
        return isinstance(self.every, str)

    def describe(self) -> str:
        """The schedule as a person reads it: the cron expression, or ``every N s``."""
        return str(self.every) if self.is_cron else 'every %d s' % int(self.every)

    def _iterate(self, at: float, reverse: bool) -> Any:
        """cronsim's ticks after ``at`` (whole seconds), or before it."""
        start = datetime.datetime.fromtimestamp(math.floor(at), zone(self.tz))
        return cronsim_module().CronSim(str(self.every), start, reverse=reverse)

    def next_after(self, at: float) -> float:
        """The first tick strictly after ``at``."""
        if not self.is_cron:
            step = int(self.every)
            return float((math.floor(at / step) + 1) * step)
        try:
            return float(next(self._iterate(at, reverse=False)).timestamp())
        except StopIteration:        # a date that never comes again (Feb 30)
            return math.inf

    def upcoming(self, at: float, count: int) -> list[float]:
        """The next ``count`` ticks after ``at``."""
        found: list[float] = []
        for _ in range(count):
            at = self.next_after(at)
            if at == math.inf:
                break
            found.append(at)
        return found

    def ticks_between(self, after: float, until: float, limit: int) -> list[float]:
        """The ticks in (``after``, ``until``], oldest first: the latest
        ``limit`` of them when there are more."""
        if not self.is_cron:
            step = int(self.every)
            last = math.floor(until / step)
            first = max(math.floor(after / step) + 1, last - limit + 1)
            return [float(k * step) for k in range(first, last + 1)]
        found: list[float] = []
        # Reverse from the second after until: cronsim goes strictly before it.
        for moment in self._iterate(math.floor(until) + 1, reverse=True):
            tick = float(moment.timestamp())
            if tick <= after or len(found) >= limit:
                break
            found.append(tick)
        return found[::-1]


def tick_id(name: str, tick: float) -> str:
    """The task id of a schedule's tick: the same in every scheduler, so a
    tick published twice would be one task (32 hex digits)."""
    text = '%s\x00%d' % (name, round(tick * 1000))
    return hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:32]


def fifo_group(name: str) -> str:
    """The message group of a schedule's runs on a FIFO queue."""
    return name if re.fullmatch(r'[!-~]{1,128}', name) else \
        hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:32]


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_CHARS \
            or any(c.isspace() or not c.isprintable() or c == '/' for c in name):
        raise ScheduleError('a schedule name must be 1 to %d characters without spaces or '
                            'slashes, got %r' % (MAX_NAME_CHARS, str(name)[:100]))
    return name


def check_fields(name: str, every: Any, tz: Any, args: Any, kwargs: Any,
                 catch_up: Any) -> dict[str, Any]:
    """The checked fields of one schedule (ScheduleError naming the schedule
    and the field; ``schedule`` is the cron expression or interval, ``every``)."""
    checked: dict[str, Any] = {}
    given: dict[str, tuple[Callable[[Any], Any], Any]] = {
        'schedule': (_check_every, every), 'tz': (check_tz, tz), 'args': (check_args, args),
        'kwargs': (check_kwargs, kwargs), 'catch_up': (check_catch_up, catch_up)}
    for field, (check, value) in given.items():
        try:
            checked[field] = check(value)
        except ValueError as exc:
            raise ScheduleError('schedule %r: %s %s' % (name, field, exc)) from None
    checked['every'] = checked.pop('schedule')
    return checked
