"""Unique tasks (``unique_for_sec``): the window a publish asks for (a class's:
None or seconds in 0..:data:`MAX_UNIQUE_SEC`; a call's overrides it, 0 there for
"not unique"), the key of a run and the claims a publish makes; the records'
store decides who holds a key (:mod:`kale.store.unique`, hook ``claim_unique``)."""
from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping, Optional, Sequence

from kale.config import Config
from kale.exceptions import PublishError
from kale.message import Message

#: The longest window a task may be unique for: a year, the longest delay.
MAX_UNIQUE_SEC = 365 * 24 * 3600


def _bad(value: Any) -> bool:
    """Whether ``value`` is not a window: seconds above 0 and at most
    MAX_UNIQUE_SEC (not a bool, not NaN)."""
    return isinstance(value, bool) or not isinstance(value, (int, float)) or \
        not 0 < value <= MAX_UNIQUE_SEC


def declared_problem(task_name: str, value: Any) -> Optional[str]:
    """The line refusing a class's ``unique_for_sec`` (None: it is good)."""
    if value is None or not _bad(value):
        return None
    return ('task %s: unique_for_sec must be None (not unique) or seconds above 0 and at most '
            '%d (a year); got %r' % (task_name, MAX_UNIQUE_SEC, value))


def unique_window(task_name: str, given: Any, declared: Any) -> Optional[float]:
    """The window a publish of ``task_name`` is unique for: ``given`` on the
    call (0: not unique for this call) or else the class's ``declared``;
    None when not unique. PublishError naming the task for a bad value."""
    if given is None:
        problem = declared_problem(task_name, declared)
        if problem:
            raise PublishError(problem)
        return None if declared is None else float(declared)
    if given == 0 and not isinstance(given, bool):
        return None
    if _bad(given):
        raise PublishError('task %s: unique_for_sec must be seconds above 0 and at most %d (a '
                           'year), or 0 for not unique on this call; got %r'
                           % (task_name, MAX_UNIQUE_SEC, given))
    return float(given)


def unique_key(task_name: str, args: tuple, kwargs: Mapping[str, Any]) -> str:
    """The key of a unique task's run: a SHA-256 of its path and arguments
    (as sorted JSON; what JSON cannot hold, by its repr)."""
    encoded = json.dumps([task_name, list(args), kwargs], sort_keys=True, default=repr,
                         separators=(',', ':'))
    return hashlib.sha256(encoded.encode('utf-8', 'surrogatepass')).hexdigest()


def unique_claims(config: Config, task_name: str, unique_sec: Optional[float],
                  pairs: Sequence[tuple[tuple, Mapping[str, Any]]],
                  messages: Sequence[Message]) -> Optional[list[tuple[str, str]]]:
    """(key, task id) of each run of a unique task; None for another task.
    PublishError without task records. ``unique_sec`` is the window
    :func:`unique_window` gave."""
    if unique_sec is None:
        return None
    if not config.RECORDS_URL:
        raise PublishError('task %s: unique_for_sec is decided in the task records: set '
                           'RECORDS_URL' % task_name)
    return [(unique_key(task_name, args, kwargs), m.task_id)
            for (args, kwargs), m in zip(pairs, messages, strict=True)]
