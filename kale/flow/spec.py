"""What a task class asks of flow control, read once per class and checked strictly
(docs/explanation/internals-workflow.md, "Where limits are kept")."""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Optional

from kale.exceptions import TaskDefinitionError

#: Each unit a rate may be given per, and its seconds: the short and long
#: spellings, singular and plural.
UNITS = {
    **dict.fromkeys(('s', 'sec', 'secs', 'second', 'seconds'), 1.0),
    **dict.fromkeys(('m', 'min', 'mins', 'minute', 'minutes'), 60.0),
    **dict.fromkeys(('h', 'hr', 'hrs', 'hour', 'hours'), 3600.0),
    **dict.fromkeys(('d', 'day', 'days'), 86400.0),
}
#: The period's short name, as a rate is shown.
SHORT = {1.0: 's', 60.0: 'm', 3600.0: 'h', 86400.0: 'd'}
#: What a rate_limit error says is accepted.
ACCEPTED = ("a whole count above 0 per second, minute, hour or day, such as '5/s', '100/m', "
            "'100/min', '100/minute', '10/h' or '1000/day'")

#: The bucket holds a second's worth of tokens, or this share of a period's
#: count when that is more (at least one token): over a minute, runs stay
#: within 5 % of the limit (1/60 over for a rate per second), + 1.
BURST_SHARE = 0.05

_RATE = re.compile(r'^\s*([^/\s]*)\s*/\s*([^/\s]*)\s*$')
_COUNT = re.compile(r'^[0-9]+$')


@dataclasses.dataclass(frozen=True)
class Rate:
    """``count`` runs per ``period_sec``."""

    count: int
    period_sec: float

    @property
    def per_sec(self) -> float:
        return self.count / self.period_sec

    @property
    def capacity(self) -> float:
        """Tokens the bucket holds at most: the burst allowed after a quiet time;
        at least a second's worth, since a refused message comes back after
        whole seconds (a smaller bucket would overflow while those wait)."""
        return max(1.0, self.count * BURST_SHARE, self.per_sec)

    def __str__(self) -> str:
        return '%d/%s' % (self.count, SHORT[self.period_sec])


def parse_rate(text: Any) -> Rate:
    """``'100/m'`` -> Rate(100, 60.0), ``'1000/day'`` -> Rate(1000, 86400.0);
    else ValueError, one line saying what is wrong and what is accepted."""
    if not isinstance(text, str):
        raise ValueError('%r is not a string: write %s' % (text, ACCEPTED))
    match = _RATE.match(text)
    if match is None:
        raise ValueError('%r is not <count>/<unit>: write %s' % (text, ACCEPTED))
    count, unit = match.groups()
    if not _COUNT.match(count) or int(count) < 1:
        raise ValueError('%r: the count %r is not a whole number above 0: write %s'
                         % (text, count, ACCEPTED))
    if unit not in UNITS:
        raise ValueError('%r: the unit %r is not one Kale knows: write %s'
                         % (text, unit, ACCEPTED))
    return Rate(int(count), UNITS[unit])


def read_rate(name: str, text: Any) -> Optional[Rate]:
    """The ``rate_limit`` of the task called ``name`` (None: it has none);
    TaskDefinitionError naming the task and the attribute when it is bad."""
    if text is None:
        return None
    try:
        return parse_rate(text)
    except ValueError as exc:
        raise TaskDefinitionError('task %s: rate_limit %s' % (name, exc)) from None


def check_concurrency(name: str, limit: Any) -> None:
    """Refuse a ``concurrency_limit`` that is not a positive integer (None: no limit)."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                              or limit < 1):
        raise TaskDefinitionError('task %s: concurrency_limit must be a whole number above 0, '
                                  'or None for no limit; got %r' % (name, limit))


#: The methods that split a limit per key.
KEY_METHODS = ('rate_limit_key', 'concurrency_key')


def check_key_method(name: str, method: str, value: Any) -> None:
    """Refuse a ``rate_limit_key`` or ``concurrency_key`` that is not a method."""
    if value is not None and not callable(value):
        raise TaskDefinitionError('task %s: %s must be a method returning the key of a call, '
                                  'def %s(self, *args, **kwargs); got %r'
                                  % (name, method, method, value))


@dataclasses.dataclass(frozen=True)
class FlowSpec:
    """A class's limits: its rate (or None), its concurrency (or None), and
    whether it splits either per key."""

    name: str                       # the task's path: keys are kept under it
    rate: Optional[Rate] = None
    concurrency: Optional[int] = None
    rate_keyed: bool = False
    concurrency_keyed: bool = False

    def rate_key(self, task: Any, args: Any, kwargs: Any) -> str:
        return '%s:%s' % (self.name, task.rate_limit_key(*args, **kwargs)) if self.rate_keyed \
            else self.name

    def concurrency_key(self, task: Any, args: Any, kwargs: Any) -> str:
        return '%s:%s' % (self.name, task.concurrency_key(*args, **kwargs)) \
            if self.concurrency_keyed else self.name

    @property
    def keyed(self) -> bool:
        return (self.rate is not None and self.rate_keyed) or \
            (self.concurrency is not None and self.concurrency_keyed)


_SPECS: dict[type, Optional[FlowSpec]] = {}


def spec_of(task_class: type) -> Optional[FlowSpec]:
    """The class's limits (None: it has none), read and checked once per
    class; TaskDefinitionError naming the class when one is bad."""
    try:
        return _SPECS[task_class]
    except KeyError:
        spec = _SPECS[task_class] = _read(task_class)
        return spec


def _read(task_class: type) -> Optional[FlowSpec]:
    path = getattr(task_class, 'task_path', None)
    name = path() if callable(path) else '%s.%s' % (task_class.__module__,
                                                    task_class.__qualname__)
    text = getattr(task_class, 'rate_limit', None)
    limit = getattr(task_class, 'concurrency_limit', None)
    if text is None and limit is None:
        return None
    rate = read_rate(name, text)
    check_concurrency(name, limit)
    for method in KEY_METHODS:
        check_key_method(name, method, getattr(task_class, method, None))
    return FlowSpec(name, rate, limit,
                    rate_keyed=callable(getattr(task_class, 'rate_limit_key', None)),
                    concurrency_keyed=callable(getattr(task_class, 'concurrency_key', None)))
