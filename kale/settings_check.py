"""Checks every setting's type and range when the settings are read, so that a
wrong value is one clear error at start, naming the setting, instead of a
traceback (or quietly wrong behaviour) later."""
from __future__ import annotations

import numbers
import re
from collections.abc import Mapping
from typing import Any, Callable, Optional
from urllib.parse import urlsplit

from kale.exceptions import ImproperlyConfigured

#: Where a task may run (TASK_ISOLATION): in the worker, or in a forked child.
TASK_ISOLATION_MODES = ('none', 'process')
#: How a worker runs its tasks (WORKER_POOL).
WORKER_POOLS = ('serial', 'threads', 'asyncio')


def _number(low: Optional[float] = None, high: Optional[float] = None,
            whole: bool = False) -> Callable[[Any], Optional[str]]:
    def check(value: Any) -> Optional[str]:
        kinds = numbers.Integral if whole else numbers.Real
        what = 'a whole number' if whole else 'a number'
        if isinstance(value, bool) or not isinstance(value, kinds) or value != value:
            return 'must be %s' % what
        number = float(value)
        if (low is not None and number < low) or (high is not None and number > high):
            shown = '%d' if whole else '%g'      # 1048576, not 1.04858e+06
            bounds = ('from %s to %s' % (shown, shown)) % (low or 0, high) if high is not None \
                else ('of at least %s' % shown) % (low or 0)
            return 'must be %s %s' % (what, bounds)
        return None
    return check


def _one_of(*choices: str) -> Callable[[Any], Optional[str]]:
    def check(value: Any) -> Optional[str]:
        return None if value in choices else 'must be one of %s' % ', '.join(map(repr, choices))
    return check


def _kind(kinds: Any, what: str) -> Callable[[Any], Optional[str]]:
    def check(value: Any) -> Optional[str]:
        return None if isinstance(value, kinds) else 'must be %s' % what
    return check


def _subset_of(*choices: str) -> Callable[[Any], Optional[str]]:
    def check(value: Any) -> Optional[str]:
        if isinstance(value, (list, tuple, set, frozenset)) and all(v in choices for v in value):
            return None
        return 'must be a list drawn from %s' % ', '.join(map(repr, choices))
    return check


def _module_prefixes(value: Any) -> Optional[str]:
    if isinstance(value, (list, tuple)) and all(
            isinstance(v, str) and v and all(part.isidentifier() for part in v.split('.'))
            for v in value):
        return None
    return "must be a list of module names, e.g. ('myapp.tasks',)"


def _host_names(value: Any) -> Optional[str]:
    if isinstance(value, (list, tuple)) and all(
            isinstance(v, str) and v and len(v) <= 253 and not any(c in v for c in '/ @')
            for v in value):
        return None
    return "must be a list of host names, e.g. ('kale.internal.example',)"


def _url(value: Any) -> Optional[str]:
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


def _region(value: Any) -> Optional[str]:
    if isinstance(value, str) and re.fullmatch(r'[a-z0-9-]*', value):
        return None
    return "must be a region name like 'us-east-1' (or '' for boto3's default)"


def _dotted_path_or(kind: str) -> Callable[[Any], Optional[str]]:
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


def _optional_dotted_path(value: Any) -> Optional[str]:
    return None if value in ('', None) else _dotted_path_or('class')(value)


def _bucket(value: Any) -> Optional[str]:
    if value == '' or (isinstance(value, str)
                       and re.fullmatch(r'[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]', value)):
        return None
    return ("must be an S3 bucket name (3 to 63 lowercase letters, digits, '.' and '-'), "
            "or '' to keep every payload in its SQS message")


def _port(value: Any) -> Optional[str]:
    if value in ('', None):
        return None
    try:
        port = int(value)
    except (TypeError, ValueError):
        return 'must be a port number'
    return None if 0 < port < 65536 else 'must be a port number from 1 to 65535'


def _records_url(value: Any) -> Optional[str]:
    if not isinstance(value, str):
        return 'must be a SQLAlchemy URL (a string)'
    if value == '':
        return None
    if not re.match(r'(sqlite|postgresql)(\+\w+)?://', value):
        return "must be a URL like 'sqlite:///records.db' or 'postgresql://user@host/db'"
    return None


def _rate_limit_url(value: Any) -> Optional[str]:
    if isinstance(value, str) and re.match(r'(redis|rediss|unix)://', value):
        return ('Redis is not supported: flow control keeps its buckets and leases in SQLite or '
                "PostgreSQL, which measured fast enough (README 'Flow control'); give a URL like "
                "'sqlite:///flow.db' or 'postgresql://user@host/db', or leave it empty for "
                'RECORDS_URL')
    return _records_url(value)


def _schedules(value: Any) -> Optional[str]:
    if isinstance(value, Mapping) and all(isinstance(name, str) and isinstance(entry, Mapping)
                                          for name, entry in value.items()):
        return None
    return ("must be a dict of schedule names to dicts, e.g. {'nightly': {'task': "
            "'myapp.tasks.Report', 'schedule': '0 3 * * *'}}")


def _ttl(value: Any) -> Optional[str]:
    return None if value is None else _number(1)(value)


def _optional(check: Callable[[Any], Optional[str]]) -> Callable[[Any], Optional[str]]:
    def optional(value: Any) -> Optional[str]:
        if value is None:
            return None
        problem = check(value)
        return problem and problem + ', or None'
    return optional


_BOOL = _kind(bool, 'True or False')
_TEXT = _kind(str, 'a string')
_KEY = _kind((str, bytes), 'a string')

CHECKS: dict[str, Callable[[Any], Optional[str]]] = {
    'MESSAGE_QUEUE_ENDPOINT_URL': _url,
    'MESSAGE_QUEUE_USE_PROXY': _BOOL,
    'MESSAGE_QUEUE_PROXY_HOST': _TEXT,
    'MESSAGE_QUEUE_PROXY_PORT': _port,
    'AWS_REGION': _region,
    'AWS_ACCESS_KEY_ID': _TEXT,
    'AWS_SECRET_ACCESS_KEY': _TEXT,
    'AWS_SESSION_TOKEN': _TEXT,
    'QUEUE_CLASS': _dotted_path_or('class'),
    'QUEUE_SELECTOR': _dotted_path_or('class'),
    'CREATE_MISSING_QUEUES': _BOOL,
    'AUTO_CREATE_TOPICS': _BOOL,
    'ENABLE_DEAD_LETTER_QUEUE': _BOOL,
    'MESSAGE_SIGNING_KEY': _KEY,
    'ON_WORKER_STARTUP': _dotted_path_or('callable'),
    'ON_WORKER_SHUTDOWN': _dotted_path_or('callable'),
    'TASK_TIMEOUT_CLASS': _optional_dotted_path,
    'BURST_GIVE_UP_SEC': _number(0),
    'CHECK_TASK_ARGUMENTS': _BOOL,
    'SQS_CONNECT_TIMEOUT_SEC': _number(0.1, 300),
    'SQS_READ_TIMEOUT_SEC': _number(1, 600),
    'QUEUE_CONFIG': _kind(str, 'a file path (a string)'),
    'QUEUE_PREFIX': _TEXT,
    'MAX_RECEIVE_COUNT': _number(1, 1000, whole=True),
    'SERIALIZER': _one_of('pickle', 'json'),
    'ACCEPT_SERIALIZERS': _subset_of('pickle', 'json'),
    'ACCEPT_LEGACY_MESSAGES': _BOOL,
    'MESSAGE_MAX_AGE_SEC': _number(60),
    'MESSAGE_SIGNING_OLD_KEYS': _kind((list, tuple, str, bytes), 'a list of keys'),
    'MESSAGE_ENCRYPTION_KEY': _KEY,
    'MESSAGE_ENCRYPTION_OLD_KEYS': _kind((list, tuple, str, bytes), 'a list of keys'),
    'MAX_DECOMPRESSED_BYTES': _number(1024, whole=True),
    'TASK_MODULES': _module_prefixes,
    'PICKLE_PROTOCOL': _number(2, 5, whole=True),
    'COMPRESSION_MIN_BYTES': _number(0, whole=True),
    'SQS_TASK_SIZE_LIMIT': _number(1024, 1048576, whole=True),
    'SQS_BATCH_REQUEST_LIMIT': _number(1024, 1048576, whole=True),
    'PAYLOAD_BUCKET': _bucket,
    'PAYLOAD_OFFLOAD_BYTES': _number(0, 1048576, whole=True),
    'TASK_MAPPER': _kind(Mapping, 'a dict of old task paths to new ones'),
    'RETRY_DELAY_MULTIPLE_SEC': _number(0, 900),
    'SQS_MAX_TASK_DELAY_SEC': _number(0, 900),
    'RETRY_DELAY_JITTER': _number(0, 1),
    'DIE_ON_RESIDENT_SET_SIZE_MB': _number(0),
    'WORKER_POOL': _one_of(*WORKER_POOLS),
    'WORKER_MAX_IN_FLIGHT': _optional(_number(1, 10000, whole=True)),
    'WORKER_STUCK_GRACE_SEC': _number(0.1, 3600),
    'WORKER_HOOKS': _kind((list, tuple), 'a list'),
    'PUBLISH_HOOKS': _kind((list, tuple), 'a list'),
    'TASK_ISOLATION': _one_of(*TASK_ISOLATION_MODES),
    'SQS_ERROR_MAX_BACKOFF_SEC': _number(0.1, 3600),
    'RECORDS_URL': _records_url,
    'RECORDS_SUCCEEDED_TTL_SEC': _ttl,
    'RECORDS_FAILED_TTL_SEC': _ttl,
    'RECORDS_QUEUED_TTL_SEC': _ttl,
    'RECORDS_BUFFER_SIZE': _number(10, whole=True),
    'RECORDS_HEARTBEAT_SEC': _number(0.1, 3600),
    'RECORDS_PURGE_INTERVAL_SEC': _number(1),
    'WORKFLOW_RESULT_MAX_BYTES': _number(1024, 64 * 1024 * 1024, whole=True),
    'WORKFLOW_SWEEP_SEC': _number(0.05, 3600),
    'WORKFLOW_PUBLISH_GRACE_SEC': _number(0.1, 3600),
    'SCHEDULES': _schedules,
    'SCHEDULER_LEASE_SEC': _number(1, 3600),
    'CONCURRENCY_LEASE_SEC': _number(3, 3600),
    'RATE_LIMIT_URL': _rate_limit_url,
    'EXECUTOR_DIR': _kind(str, 'a directory path'),
    'EXECUTOR_STDERR_MAX_BYTES': _number(0, 16 * 1024 * 1024, whole=True),
    'EXECUTOR_STDOUT_MAX_BYTES': _number(1, 1024 * 1024 * 1024, whole=True),
    'EXECUTOR_KILL_GRACE_SEC': _number(0, 600),
    'RECORDS_MAX_VALUE_CHARS': _number(100, 1000000, whole=True),
    'OUTBOX_URL': _TEXT,
    'OUTBOX_POLL_SEC': _number(0.01, 3600),
    'CONSUMED_TTL_SEC': _ttl,
    'WEB_TOKEN': _TEXT,
    'WEB_ALLOW_SUBMIT_WITHOUT_TOKEN': _BOOL,
    'RECORDS_SENSITIVE_DATA': _one_of('encrypt', 'drop'),
    'RECORDS_SETTLE_WAIT_SEC': _number(0, 60),
    'RECORDS_SPOOL_DIR': _TEXT,
    'WEB_ALLOWED_HOSTS': _host_names,
    'WEBHOOK_QUEUE': _kind(str, 'a queue name (a string)'),
    'WEBHOOK_TIMEOUT_SEC': _number(0.1, 300),
    'WEBHOOK_ALLOWED_HOSTS': _host_names,
    'METRICS_PORT': _number(0, 65535, whole=True),
    'METRICS_HOST': _TEXT,
    'LOG_FORMAT': _one_of('text', 'json'),
    'LOG_EXCEPTION_MESSAGES': _BOOL,
    'TRACING': _BOOL,
}


def check_settings(values: dict[str, Any]) -> None:
    """Raise ImproperlyConfigured for the first setting with a wrong value."""
    for name, check in CHECKS.items():
        if name in values:
            problem = check(values[name])
            if problem:
                raise ImproperlyConfigured('setting %s %s, got %r' % (name, problem, values[name]))
