"""Logging for the ``kale`` command: levels, and no secrets in the output.

``--log-level`` sets Kale's loggers (and the application's); the AWS
libraries (botocore, boto3, urllib3) stay at WARNING unless
``--aws-log-level`` asks for more, because at DEBUG they print every request:
credentials, session tokens and message bodies. Even then,
:class:`RedactingFilter` blanks the ``Authorization`` and
``X-Amz-Security-Token`` headers, ``Credential=`` and ``Signature=`` values,
and message bodies, in whatever those libraries log.

Kale's own log lines carry task ids, names and queues, never arguments.
"""
from __future__ import annotations

import logging
import re
from typing import Optional

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
    re.compile(r'(?P<keep>Signature=)(?P<secret>[0-9a-fA-F]+)'),
    re.compile(r'(?P<keep>X-Amz-Credential=)(?P<secret>[^&\s\'"]+)', re.IGNORECASE),
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


def configure(level: str = 'INFO', aws_level: str = 'WARNING',
              handler: Optional[logging.Handler] = None) -> logging.Handler:
    """Log to stderr (or ``handler``) at ``level``, the AWS libraries at
    ``aws_level``, with secrets redacted; returns the handler."""
    if handler is None:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter('%(asctime)s %(levelname)s %(name)s: %(message)s'))
    handler.addFilter(RedactingFilter())
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
    return handler
