"""The way to the default app from below :mod:`kale.app`, for the conveniences and
entry points only (docs/explanation/internals-top.md, "The app and its parts")."""
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
