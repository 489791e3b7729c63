"""What a task class asks of flow control, read once per class and checked strictly.

``rate_limit`` is ``'<count>/<s|m|h>'`` (``'100/m'``: a hundred runs a
minute across the fleet); ``concurrency_limit`` a positive integer. A bad
value is a :class:`~kale.exceptions.TaskDefinitionError` of one line naming
the class.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Optional

from kale.exceptions import TaskDefinitionError

#: Seconds in each period a rate may be given per.
PERIODS = {'s': 1.0, 'm': 60.0, 'h': 3600.0}

#: The bucket holds a second's worth of tokens, or this share of a period's
#: count when that is more (at least one token): over a minute, runs stay
#: within 5 % of the limit (1/60 over for a rate per second), + 1.
BURST_SHARE = 0.05

_RATE = re.compile(r'^\s*([1-9][0-9]*)\s*/\s*([smh])\s*$')


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
        """Tokens the bucket holds at most: the burst allowed after a quiet
        time. At least a second's worth, since a refused message comes back
        after whole seconds: a bucket smaller than that would overflow while
        those refused wait."""
        return max(1.0, self.count * BURST_SHARE, self.per_sec)

    def __str__(self) -> str:
        unit = {1.0: 's', 60.0: 'm', 3600.0: 'h'}[self.period_sec]
        return '%d/%s' % (self.count, unit)


def parse_rate(text: Any) -> Rate:
    """``'100/m'`` -> Rate(100, 60.0); ValueError for anything else."""
    match = _RATE.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError('%r is not a rate such as \'100/m\' (a positive count per s, m or h)'
                         % (text,))
    return Rate(int(match.group(1)), PERIODS[match.group(2)])


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
        if not self.rate_keyed:
            return self.name
        return '%s:%s' % (self.name, task.rate_limit_key(*args, **kwargs))

    def concurrency_key(self, task: Any, args: Any, kwargs: Any) -> str:
        if not self.concurrency_keyed:
            return self.name
        return '%s:%s' % (self.name, task.concurrency_key(*args, **kwargs))

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
        pass
    spec = _read(task_class)
    _SPECS[task_class] = spec
    return spec


def _read_rate(name: str, text: Any) -> Optional[Rate]:
    """The class's ``rate_limit`` (None when it has none), checked."""
    if text is None:
        return None
    try:
        return parse_rate(text)
    except ValueError as exc:
        raise TaskDefinitionError('%s.rate_limit: %s' % (name, exc)) from None


def _check_concurrency(name: str, limit: Any) -> None:
    """Refuse a ``concurrency_limit`` that is not a positive integer (None: no limit)."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                              or limit < 1):
        raise TaskDefinitionError('%s.concurrency_limit: %r is not a positive integer'
                                  % (name, limit))


def _check_key_methods(name: str, task_class: type) -> None:
    """Refuse a ``rate_limit_key`` or ``concurrency_key`` that is not a method."""
    for method in ('rate_limit_key', 'concurrency_key'):
        if hasattr(task_class, method) and not callable(getattr(task_class, method)):
            raise TaskDefinitionError('%s.%s must be a method' % (name, method))


def _read(task_class: type) -> Optional[FlowSpec]:
    name = '%s.%s' % (task_class.__module__, task_class.__qualname__)
    text = getattr(task_class, 'rate_limit', None)
    limit = getattr(task_class, 'concurrency_limit', None)
    if text is None and limit is None:
        return None
    rate = _read_rate(name, text)
    _check_concurrency(name, limit)
    _check_key_methods(name, task_class)
    path = getattr(task_class, 'task_path', None)
    return FlowSpec(path() if callable(path) else name, rate, limit,
                    rate_keyed=callable(getattr(task_class, 'rate_limit_key', None)),
                    concurrency_keyed=callable(getattr(task_class, 'concurrency_key', None)))
