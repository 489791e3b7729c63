"""Bounded, JSON-safe renderings of a record's arguments, results and errors
(``exact``: the rendering is the value itself). Why and how:
docs/explanation/internals-records.md."""
from __future__ import annotations

import json
import math
import traceback
from typing import Any, Optional

from kale.exceptions import Retry

MAX_STRING_CHARS = 1000
MAX_ITEMS = 100
MAX_DEPTH = 8
MAX_ERROR_MESSAGE_CHARS = 2000
MAX_TRACEBACK_CHARS = 8000

_SCALARS = (str, int, float, bool, type(None))


class _Rendering:
    def __init__(self) -> None:
        self.exact = True

    def value(self, value: Any, depth: int = 0) -> Any:
        kind = type(value)
        if kind is str:
            return self._string(value)
        if kind is bool or kind is int or value is None:
            return value
        if kind is float:
            return self._float(value)
        if depth >= MAX_DEPTH:
            self.exact = False
            return '...'
        if kind is list or kind is tuple:
            return self._sequence(value, kind is tuple, depth)
        if kind is dict:
            return self._mapping(value, depth)
        return self._other(value)

    def _string(self, value: str) -> str:
        if len(value) > MAX_STRING_CHARS:
            self.exact = False
            return value[:MAX_STRING_CHARS] + '...'
        return value

    def _float(self, value: float) -> Any:
        if math.isfinite(value):
            return value
        self.exact = False
        return repr(value)

    def _sequence(self, value: Any, is_tuple: bool, depth: int) -> list[Any]:
        if is_tuple:
            self.exact = False         # comes back as a list
        items = [self.value(item, depth + 1) for item in value[:MAX_ITEMS]]
        if len(value) > MAX_ITEMS:
            self.exact = False
            items.append('... %d more' % (len(value) - MAX_ITEMS))
        return items

    def _mapping(self, value: dict[Any, Any], depth: int) -> dict[str, Any]:
        out = {}
        for number, (key, item) in enumerate(value.items()):
            if number >= MAX_ITEMS:
                self.exact = False
                out['...'] = '%d more' % (len(value) - MAX_ITEMS)
                break
            if type(key) is not str:
                self.exact = False
                key = repr(key)
            out[key] = self.value(item, depth + 1)
        return out

    def _other(self, value: Any) -> str:
        self.exact = False
        try:
            text = repr(value)
        except Exception as exc:       # a broken __repr__ must not lose the record
            text = '<%s: repr failed: %s>' % (type(value).__name__, type(exc).__name__)
        return text[:MAX_STRING_CHARS]


def render(value: Any) -> tuple[Any, bool]:
    """A JSON-safe rendering of ``value`` and whether it is exact."""
    rendering = _Rendering()
    return rendering.value(value), rendering.exact


def bounded(rendered: Any, max_chars: int) -> tuple[Any, bool]:
    """``rendered`` itself when its JSON fits ``max_chars``, else a marker with
    the start of its JSON; and whether it was kept whole."""
    if isinstance(rendered, _SCALARS) and not isinstance(rendered, str):
        return rendered, True
    text = json.dumps(rendered, separators=(',', ':'))
    if len(text) <= max_chars:
        return rendered, True
    return {'truncated': True, 'chars': len(text), 'preview': text[:max_chars]}, False


def render_inputs(args: Any, kwargs: Any, max_chars: int) -> dict[str, Any]:
    """A task's arguments for its record: ``{"args", "kwargs", "exact"}``."""
    if type(args) is tuple and type(kwargs) is dict and not kwargs and all(
            type(a) in (int, str, bool) and (type(a) is not str or len(a) < 200) for a in args):
        return {'args': list(args), 'kwargs': {}, 'exact': True}   # the common, cheap case
    rendered_args, exact_args = render(list(args))
    rendered_kwargs, exact_kwargs = render(dict(kwargs))
    whole, kept = bounded({'args': rendered_args, 'kwargs': rendered_kwargs}, max_chars)
    if not kept:
        return {'args': [], 'kwargs': {}, 'exact': False, 'truncated': whole}
    whole['exact'] = exact_args and exact_kwargs
    return whole


def render_result(result: Any, max_chars: int) -> Any:
    """A task's return value for its record."""
    rendered, _ = render(result)
    return bounded(rendered, max_chars)[0]


def error_fields(exc: Optional[BaseException], fallback: str = '') -> dict[str, Optional[str]]:
    """``error_type``, ``error_message`` and ``error_traceback`` (the end of the
    traceback, which says where it failed, cut to a bound). Of a
    :class:`~kale.retry.Retry` with a cause: the cause's type and message
    (the traceback, the Retry's, shows the cause's first)."""
    if exc is None:
        return {'error_type': None, 'error_message': fallback[:MAX_ERROR_MESSAGE_CHARS] or None,
                'error_traceback': None}
    trace = ''.join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if len(trace) > MAX_TRACEBACK_CHARS:
        trace = '...\n' + trace[-MAX_TRACEBACK_CHARS:]
    if isinstance(exc, Retry) and exc.exc is not None:
        exc = exc.exc
    try:
        message = str(exc)
    except Exception:
        message = '<str() failed>'
    return {'error_type': type(exc).__name__[:255],
            'error_message': message[:MAX_ERROR_MESSAGE_CHARS],
            'error_traceback': trace}
