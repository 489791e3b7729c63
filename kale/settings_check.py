"""The checks a setting's value must pass, for the table of
:mod:`kale.default_settings`: each takes the value and returns None, or the
problem in a few words ("must be a whole number from 1 to 1000"), which
:func:`kale.config.check_settings` turns into one line naming the setting,
at start, instead of a traceback (or quietly wrong behaviour) later."""
from __future__ import annotations

import numbers
import re
from collections.abc import Mapping
from typing import Any, Callable, Optional
from urllib.parse import urlsplit

#: Where a task may run (TASK_ISOLATION): in the worker, or in a forked child.
TASK_ISOLATION_MODES = ('none', 'process')
#: How a worker runs its tasks (WORKER_POOL).
WORKER_POOLS = ('serial', 'threads', 'asyncio')

#: A check: the value, to None (it passes) or the problem in a few words.
Check = Callable[[Any], Optional[str]]


def number(low: Optional[float] = None, high: Optional[float] = None,
            whole: bool = False) -> Callable[[Any], Optional[str]]:
    kinds = numbers.Integral if whole else numbers.Real
    what = 'a whole number' if whole else 'a number'
    shown = '%d' if whole else '%g'      # 1048576, not 1.04858e+06
    bounds = ('from %s to %s' % (shown, shown)) % (low or 0, high) if high is not None \
        else ('of at least %s' % shown) % (low or 0)

    def check(value: Any) -> Optional[str]:
        if isinstance(value, bool) or not isinstance(value, kinds) or value != value:
            return 'must be %s' % what
        if (low is not None and float(value) < low) or (high is not None and float(value) > high):
            return 'must be %s %s' % (what, bounds)
        return None
    return check


def one_of(*choices: str) -> Callable[[Any], Optional[str]]:
    def check(value: Any) -> Optional[str]:
        return None if value in choices else 'must be one of %s' % ', '.join(map(repr, choices))
    return check


def kind(kinds: Any, what: str) -> Callable[[Any], Optional[str]]:
    def check(value: Any) -> Optional[str]:
        return None if isinstance(value, kinds) else 'must be %s' % what
    return check


def subset_of(*choices: str) -> Callable[[Any], Optional[str]]:
    def check(value: Any) -> Optional[str]:
        if isinstance(value, (list, tuple, set, frozenset)) and all(v in choices for v in value):
            return None
        return 'must be a list drawn from %s' % ', '.join(map(repr, choices))
    return check


def module_prefixes(value: Any) -> Optional[str]:
    if isinstance(value, (list, tuple)) and all(
            isinstance(v, str) and v and all(part.isidentifier() for part in v.split('.'))
            for v in value):
        return None
    return "must be a list of module names, e.g. ('myapp.tasks',)"


def host_names(value: Any) -> Optional[str]:
    if isinstance(value, (list, tuple)) and all(
            isinstance(v, str) and v and len(v) <= 253 and not any(c in v for c in '/ @')
            for v in value):
        return None
    return "must be a list of host names, e.g. ('kale.internal.example',)"


def url(value: Any) -> Optional[str]:
    if not isinstance(value, str):
        return 'must be a URL (a string)'
    if value == '':
        return None
    parts = urlsplit(value)
    if parts.scheme not in ('http', 'https') or not parts.hostname:
        return "must be a URL with a scheme and a host, like 'http://127.0.0.1:9324'"
    try:
        port = parts.port
    except ValueError:
        port = -1
    return 'must be a URL with a valid port' if port == -1 else None


def region(value: Any) -> Optional[str]:
    if isinstance(value, str) and re.fullmatch(r'[a-z0-9-]*', value):
        return None
    return "must be a region name like 'us-east-1' (or '' for boto3's default)"


def dotted_path_or(kind: str) -> Callable[[Any], Optional[str]]:
    def check(value: Any) -> Optional[str]:
        if isinstance(value, str) and re.fullmatch(r'\w+(\.\w+)+', value):
            return None
        if kind == 'class' and isinstance(value, type):
            return None
        if kind == 'callable' and (value is None or callable(value)):
            return None
        return 'must be a dotted path like "package.module.Name"%s' % (
            ' or a class' if kind == 'class' else ', a callable or None')
    return check


def optional_dotted_path(value: Any) -> Optional[str]:
    return None if value in ('', None) else dotted_path_or('class')(value)


def bucket(value: Any) -> Optional[str]:
    if value == '' or (isinstance(value, str)
                       and re.fullmatch(r'[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]', value)):
        return None
    return ("must be an S3 bucket name (3 to 63 lowercase letters, digits, '.' and '-'), "
            "or '' to keep every payload in its SQS message")


def port(value: Any) -> Optional[str]:
    if value in ('', None):
        return None
    try:
        port = int(value)
    except (TypeError, ValueError):
        return 'must be a port number'
    return None if 0 < port < 65536 else 'must be a port number from 1 to 65535'


def records_url(value: Any) -> Optional[str]:
    if not isinstance(value, str):
        return 'must be a SQLAlchemy URL (a string)'
    if value == '' or re.fullmatch(r'memory://[\w.-]*', value) \
            or re.match(r'(sqlite|postgresql)(\+\w+)?://', value):
        return None
    return ("must be a URL like 'sqlite:///records.db' or 'postgresql://user@host/db' "
            "(or 'memory://NAME' for one process's tests)")


def rate_limit_url(value: Any) -> Optional[str]:
    if isinstance(value, str) and re.match(r'(redis|rediss|unix)://', value):
        return ('Redis is not supported: flow control keeps its buckets and leases in SQLite or '
                "PostgreSQL, which measured fast enough (docs: 'Flow control'); give a URL like "
                "'sqlite:///flow.db' or 'postgresql://user@host/db', or leave it empty for "
                'RECORDS_URL')
    return records_url(value)


def schedules(value: Any) -> Optional[str]:
    if isinstance(value, Mapping) and all(isinstance(name, str) and isinstance(entry, Mapping)
                                          for name, entry in value.items()):
        return None
    return ("must be a dict of schedule names to dicts, e.g. {'nightly': {'task': "
            "'myapp.tasks.Report', 'schedule': '0 3 * * *'}}")


def ttl(value: Any) -> Optional[str]:
    return None if value is None else number(1)(value)


def optional(check: Callable[[Any], Optional[str]]) -> Callable[[Any], Optional[str]]:
    def optional(value: Any) -> Optional[str]:
        if value is None:
            return None
        problem = check(value)
        return problem and problem + ', or None'
    return optional


BOOL = kind(bool, 'True or False')
TEXT = kind(str, 'a string')
KEY = kind((str, bytes), 'a string')
KEYS = kind((list, tuple, str, bytes), 'a list of keys')
