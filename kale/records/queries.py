"""The filters of questions about many records, shared by ``kale web`` and ``kale tasks``.

Filters come from query parameters (``status``, ``task``, ``queue``,
``label.KEY``, ``since``, ``until``): :func:`parse_filter` checks them and
raises BadFilterError with one line naming the bad one. The questions are
the store's (:class:`kale.store.records.RecordQueries`, whichever backend).
"""
from __future__ import annotations

import datetime
import math
from typing import Any, Callable, Mapping, Optional

from kale.exceptions import BadFilterError
from kale.publish_checks import LABEL_KEY
from kale.statuses import PENDING_FILTER, PENDING_TASK, TaskStatus
from kale.store.record import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    TaskFilter,
    decode_cursor,
    encode_cursor,
)
from kale.store.records import RecordQueries as Queries

STATUSES = tuple(TaskStatus)
#: Query parameters that are not filters.
NOT_FILTERS = ('limit', 'cursor', 'all', 'state', 'window', 'bucket')


def parse_statuses(text: str) -> tuple[str, ...]:
    found: list[str] = []
    for status in (part.strip() for part in text.split(',') if part.strip()):
        if status == PENDING_FILTER:
            found.extend(PENDING_TASK)
        elif status in STATUSES:
            found.append(TaskStatus(status))
        else:
            raise BadFilterError('unknown status %r: use one of %s, %s'
                                 % (status, ', '.join(STATUSES), PENDING_FILTER))
    return tuple(dict.fromkeys(found))


def parse_time(name: str, text: str) -> float:
    """Epoch seconds, or an ISO 8601 time (UTC unless it says otherwise)."""
    try:
        value = float(text)
        if math.isfinite(value):
            return value
    except ValueError:
        pass
    try:
        moment = datetime.datetime.fromisoformat(text.strip().replace('Z', '+00:00'))
    except ValueError:
        raise BadFilterError('%s must be epoch seconds or an ISO 8601 time, got %r'
                             % (name, text)) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()


#: Bounds on what one query may ask for (a query is a request anyone with
#: access to the API can make).
MAX_LABEL_FILTERS = 8
MAX_LABEL_VALUE_CHARS = 256


def _name_filter(name: str, value: str) -> Optional[str]:
    if len(value) > MAX_LABEL_VALUE_CHARS:
        raise BadFilterError('%s filter: at most %d characters' % (name, MAX_LABEL_VALUE_CHARS))
    return value or None


#: Each field's filter: (the TaskFilter field, its parser of (name, value)).
_FIELDS: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    'status': ('statuses', lambda name, value: parse_statuses(value)),
    'task': ('task', _name_filter),
    'queue': ('queue', _name_filter),
    'since': ('since', parse_time),
    'until': ('until', parse_time),
}


def _label_filter(name: str, value: str) -> tuple[str, str]:
    key = name[len('label.'):]
    if not LABEL_KEY.fullmatch(key):
        raise BadFilterError('label filter %r: a key is 1-64 letters, digits or _.:-' % name)
    if len(value) > MAX_LABEL_VALUE_CHARS:
        raise BadFilterError('label filter %r: a value is at most %d characters'
                             % (name, MAX_LABEL_VALUE_CHARS))
    return key, value


def parse_filter(params: Mapping[str, str]) -> TaskFilter:
    """A filter from query parameters; BadFilterError for a bad or unknown one."""
    fields: dict[str, Any] = {}
    labels = []
    for name, value in params.items():
        if name in _FIELDS:
            field, parse = _FIELDS[name]
            fields[field] = parse(name, value)
        elif name.startswith('label.'):
            labels.append(_label_filter(name, value))
            if len(labels) > MAX_LABEL_FILTERS:
                raise BadFilterError('at most %d label filters at once' % MAX_LABEL_FILTERS)
        elif name not in NOT_FILTERS:
            raise BadFilterError('unknown filter %r: use status, task, queue, label.KEY, '
                                 'since or until' % name)
    return TaskFilter(labels=tuple(sorted(labels)), **fields)


def parse_limit(text: Optional[str], default: int = DEFAULT_LIMIT) -> int:
    if text is None or text == '':
        return default
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise BadFilterError('limit must be a whole number from 1 to %d, got %r'
                             % (MAX_LIMIT, text))
    return int(text)


__all__ = ['DEFAULT_LIMIT', 'MAX_LIMIT', 'NOT_FILTERS', 'Queries', 'TaskFilter', 'decode_cursor',
           'encode_cursor', 'parse_filter', 'parse_limit', 'parse_statuses', 'parse_time']
