"""A failure's reason as one line (``no_retries: ValueError: refused card ...``),
whole or, where task data is encrypted and messages may quote arguments, with
the exception named by its type alone (a dead letter's attribute, a log line)."""
from __future__ import annotations

from typing import Optional

from kale.exceptions import describe


def without_message(reason: str, exc: Optional[BaseException]) -> str:
    """A failure's reason with its exception named by type alone: ``ValueError``
    for ``ValueError: refused card ...``, ``no_retries: ValueError`` for a
    dead letter's (what may be logged where task data is encrypted)."""
    if exc is not None:
        full = describe(exc)
        if full in reason:
            return reason.replace(full, type(exc).__name__)
    return short_reason(reason)


def short_reason(reason: str) -> str:
    """A failure's reason without the error's message: ``no_retries:
    ValueError`` of ``no_retries: ValueError: refused card ...`` (what is
    kept in clear where task data is encrypted)."""
    return ': '.join(reason.split(': ')[:2])
