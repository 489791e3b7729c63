"""Objects named by dotted paths (``package.module.Name``), as settings name hooks and classes."""
from __future__ import annotations

import importlib
from typing import Any

from kale.exceptions import ImproperlyConfigured


def import_string(path: str, what: str = 'object') -> Any:
    """Import ``package.module.Name`` and return ``Name``.

    Raises ImproperlyConfigured naming ``what`` (e.g. the setting) on failure.
    """
    module_name, _, attr = path.rpartition('.')
    if not module_name:
        raise ImproperlyConfigured('%s %r is not a dotted path like "package.module.Name"'
                                   % (what, path))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImproperlyConfigured('%s %r cannot be imported: %s' % (what, path, exc)) from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ImproperlyConfigured('%s %r: module %r has no %r'
                                   % (what, path, module_name, attr)) from None


def resolve_callable(value: Any, setting: str) -> Any:
    """A setting that holds a callable or a dotted path to one."""
    if value is None:
        return None
    if isinstance(value, str):
        value = import_string(value, setting)
    if not callable(value):
        raise ImproperlyConfigured('%s must be a callable or a dotted path to one, got %r'
                                   % (setting, value))
    return value
