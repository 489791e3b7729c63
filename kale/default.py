"""The way to the default app from below :mod:`kale.app`.

The default app (``KALE_SETTINGS_MODULE``'s) is only for the module-level
conveniences application code calls without an app (``MyTask.publish``,
``kale.records.get``, ``topics.publish``, ...), each one line that picks it
and calls the app's own method, and for the entry points (the command line,
``kale web``, Django). Every part below them is given its app's parts.

This module is that way, kept apart so that an import-linter contract
(``.importlinter``) and ``tests/unit/test_default_app.py`` can hold the list
of the modules that reach for it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    from kale.app import App

#: What gives the default app (registered by :mod:`kale.app`, which ``kale``
#: itself imports: it is in place before any part of Kale runs).
_provider: Optional[Callable[[], 'App']] = None


def default_app() -> 'App':
    """The default app: :func:`kale.app.default_app`."""
    assert _provider is not None, 'kale.app registers the default app'
    return _provider()


def register_default(provider: Callable[[], 'App']) -> None:
    """Make ``provider`` what :func:`default_app` asks (:mod:`kale.app` does)."""
    global _provider
    _provider = provider
