"""Logging for the ``kale`` command: levels, task fields on every record, text
or JSON lines, and no secrets in the output (the AWS libraries' credentials and
message bodies redacted; docs/explanation/internals-top.md, "Logging")."""
from __future__ import annotations

import contextvars
import datetime
import json
import logging
import re
from typing import Any, Optional


def exception_messages(config: Any) -> bool:
    """Whether a worker's lines about failed runs may carry exception
    messages: ``LOG_EXCEPTION_MESSAGES``, and never with task data encrypted."""
    return bool(getattr(config, 'LOG_EXCEPTION_MESSAGES', True)) \
        and not getattr(config, 'MESSAGE_ENCRYPTION_KEY', None)


#: Fields a record may carry about the task and worker it concerns.
TASK_FIELDS = ('task_id', 'task', 'queue', 'attempt')
FIELDS = TASK_FIELDS + ('worker',)
LOG_FORMATS = ('text', 'json')
TEXT_FORMAT = '%(asctime)s %(levelname)s %(name)s: %(message)s'

#: Libraries that print requests (with credentials) when at DEBUG.
AWS_LOGGERS = ('botocore', 'boto3', 'urllib3', 's3transfer')
REDACTED = '[redacted]'

_PATTERNS = [
    # Headers in a request's repr: 'Authorization': b'AWS4-HMAC-SHA256 ...'
    re.compile(r"""(?P<keep>['"]?(?:Authorization|X-Amz-Security-Token)['"]?\s*[:=]\s*b?['"])"""
               r"""(?P<secret>[^'"]*)""", re.IGNORECASE),
    # Canonical requests: one header a line, 'x-amz-security-token:...'
    re.compile(r'(?P<keep>x-amz-security-token:)(?P<secret>\S+)', re.IGNORECASE),
    re.compile(r'(?P<keep>Credential=)(?P<secret>[^,\s\'"]+)'),
    re.compile(r'(?P<keep>Signature=)(?P<secret>[^,&\s\'"]+)'),
    # botocore.auth logs 'Signature:\n<hex>' for every request it signs.
    re.compile(r'(?P<keep>\bSignature:\s*)(?P<secret>[0-9A-Za-z+/=]+)'),
    re.compile(r'(?P<keep>X-Amz-Credential=)(?P<secret>[^&\s\'"]+)', re.IGNORECASE),
    re.compile(r'(?P<keep>X-Amz-Security-Token=)(?P<secret>[^&\s\'"]+)', re.IGNORECASE),
    # Message bodies, in request parameters and JSON requests and responses.
    re.compile(r"""(?P<keep>\\?['"](?:MessageBody|Body)\\?['"]\s*:\s*\\?['"])"""
               r"""(?P<secret>(?:\\\\.|[^'"\\])*)"""),
]


def redact(text: str) -> str:
    """``text`` with credentials and message bodies blanked."""
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: m.group('keep') + REDACTED, text)
    return text


class RedactingFilter(logging.Filter):
    """Blanks secrets in records of the AWS libraries (Kale's own carry none)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.split('.', 1)[0] in AWS_LOGGERS:
            message = record.getMessage()
            cleaned = redact(message)
            if cleaned != message:
                record.msg, record.args = cleaned, None
        return True


#: The filter :func:`redact_aws_loggers` puts on the AWS libraries' loggers.
AWS_LOGGER_FILTER = RedactingFilter()


def redact_aws_loggers() -> None:
    """Put :data:`AWS_LOGGER_FILTER` on every logger of the AWS libraries
    there is now (once each; all exist by the time a client is built)."""
    loggers = logging.Logger.manager.loggerDict
    for name in list(AWS_LOGGERS) + [name for name in list(loggers)
                                     if name.split('.', 1)[0] in AWS_LOGGERS]:
        logger = logging.getLogger(name)
        if AWS_LOGGER_FILTER not in logger.filters:
            logger.addFilter(AWS_LOGGER_FILTER)


# --- the task a worker is running, and the worker ---------------------------

#: (task id, task path, queue name, attempt) of the task running in this
#: thread, while it runs.
_running: contextvars.ContextVar[Optional[tuple[str, str, str, int]]] = \
    contextvars.ContextVar('kale_running_task', default=None)
_worker: Optional[str] = None


def set_worker(name: Optional[str]) -> None:
    """Name this process's worker in every record (``worker`` field)."""
    global _worker
    _worker = name


def task_started(task_id: str, task: str, queue: str, attempt: int) -> contextvars.Token:
    """Records logged in this thread now concern this task, until :func:`task_ended`."""
    return _running.set((task_id, task, queue, attempt))


def task_ended(token: contextvars.Token) -> None:
    _running.reset(token)


def task_fields(task_id: str, task: str, queue: str, attempt: Optional[int]) -> dict[str, Any]:
    """The ``extra`` for a line about a task logged outside its run."""
    return {'task_id': task_id, 'task': task, 'queue': queue, 'attempt': attempt}


class ContextFilter(logging.Filter):
    """Gives every record the fields in :data:`FIELDS`: those passed through
    ``extra`` are kept, the others come from the running task (None when none
    runs)."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = record.__dict__
        running = _running.get()
        if running is None:
            for name in TASK_FIELDS:
                fields.setdefault(name, None)
        else:
            for name, value in zip(TASK_FIELDS, running, strict=True):
                fields.setdefault(name, value)
        fields.setdefault('worker', _worker)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (UTC, ISO 8601), level, logger, message, the
    known fields of :data:`FIELDS`, and the traceback as ``exception``. Only
    these: whatever else a record carries is left out."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            'time': datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc)
            .isoformat(timespec='milliseconds').replace('+00:00', 'Z'),
            'level': record.levelname, 'logger': record.name, 'message': record.getMessage()}
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry['exception'] = self.formatException(record.exc_info)
        if record.stack_info:
            entry['stack'] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str)


def formatter(log_format: str) -> logging.Formatter:
    """The formatter for ``LOG_FORMAT``: 'text' or 'json'."""
    if log_format == 'json':
        return JsonFormatter()
    if log_format == 'text':
        return logging.Formatter(TEXT_FORMAT)
    raise ValueError('log format must be one of %s, got %r' % (', '.join(LOG_FORMATS), log_format))


def configure(level: str = 'INFO', aws_level: str = 'WARNING',
              handler: Optional[logging.Handler] = None,
              log_format: Optional[str] = None) -> logging.Handler:
    """Log to stderr (or ``handler``) at ``level``, the AWS libraries at
    ``aws_level``, secrets redacted and task fields filled in; returns the
    handler. ``log_format``: 'text' (a new handler's default) or 'json'."""
    if handler is None:
        handler = logging.StreamHandler()
        log_format = log_format or 'text'
    if log_format is not None:
        handler.setFormatter(formatter(log_format))
    handler.addFilter(RedactingFilter())
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        if getattr(existing, '_kale', False):
            root.removeHandler(existing)
    handler._kale = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger('kale').setLevel(level)
    for name in AWS_LOGGERS:
        logging.getLogger(name).setLevel(aws_level)
    redact_aws_loggers()
    return handler
