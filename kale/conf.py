"""Settings, read lazily from ``kale.default_settings`` and ``KALE_SETTINGS_MODULE``.

``from kale import settings`` gives the one :class:`Settings` object. Nothing
is read at import: the first attribute access loads the defaults and then the
module named by ``KALE_SETTINGS_MODULE``; :meth:`Settings.reload` reads them
again. Code that caches something derived from settings keys its cache on
:attr:`Settings.generation`, which changes on every reload or override.
"""
from __future__ import annotations

import contextlib
import difflib
import importlib
import itertools
import logging
import os
import sys
import threading
import types
from typing import Any, Callable, Generic, Iterator, Optional, TypeVar

from kale import default_settings
from kale.exceptions import ImproperlyConfigured
from kale.settings_check import check_settings

ENVIRONMENT_VARIABLE = 'KALE_SETTINGS_MODULE'

logger = logging.getLogger(__name__)

_generations = itertools.count(1)


def _public_names(module: types.ModuleType) -> dict[str, Any]:
    return {name: getattr(module, name) for name in dir(module)
            if name.isupper() and not name.startswith('_')}


def _import_settings_module(name: str, fresh: bool, source: str) -> types.ModuleType:
    """Import the settings module; with ``fresh``, run it again if already imported
    (settings modules often read the environment). Errors name ``source``, where
    the module's name came from."""
    try:
        loaded = name in sys.modules
        module = importlib.import_module(name)
        return importlib.reload(module) if fresh and loaded else module
    except ImportError as exc:
        raise ImproperlyConfigured('%s %r cannot be imported: %s' % (source, name, exc)) from exc
    except ImproperlyConfigured as exc:
        raise ImproperlyConfigured('settings module %s: %s' % (name, exc)) from exc
    except Exception as exc:
        raise ImproperlyConfigured('%s %r failed while loading: %s: %s'
                                   % (source, name, type(exc).__name__, exc)) from exc


#: Settings of the original Kale that Kale dropped, and what replaces each.
DROPPED_SETTINGS = {
    'USE_DEAD_LETTER_QUEUE': 'it is ENABLE_DEAD_LETTER_QUEUE',
    'COMPRESSOR': 'bodies are compressed with zlib when that helps (COMPRESSION_MIN_BYTES)',
    'DECOMPRESSOR': 'bodies are compressed with zlib when that helps (COMPRESSION_MIN_BYTES)',
    'UTIL_CRYPT_CIPHER': 'bodies are encrypted with AES-256-GCM under MESSAGE_ENCRYPTION_KEY',
    'PROPERLY_CONFIGURED': 'settings are checked when they load',
    'TIMESTAMP_FUNC': 'messages carry time.time() as their enqueue and issue times',
    'PUBLISHER_STR_FUNC': 'messages carry the publisher as host[pid]',
    'RESET_TIMEOUT_THRESHOLD': 'a task that no longer fits its batch\'s visibility timeout is '
                               'released for a later batch, not started',
    'SQS_QUEUE_TAG_FUNCTION': 'create and tag queues with your infrastructure code and set '
                              'CREATE_MISSING_QUEUES = False',
}

_warned: set[tuple[str, str]] = set()


def warn_unknown(module_name: str, own: dict[str, Any], known: dict[str, Any]) -> None:
    """Warn once per name about a setting Kale does not know that looks like a
    misspelt one, or that the original Kale had. (Other UPPER_CASE names are
    the application's own and are left alone.)"""
    for name in sorted(set(own) - set(known)):
        if (module_name, name) in _warned:
            continue
        if name in DROPPED_SETTINGS:
            advice = 'a setting of the original Kale that Kale dropped: %s' % DROPPED_SETTINGS[name]
        else:
            close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.8)
            if not close:
                continue
            advice = 'not a Kale setting; did you mean %s?' % close[0]
        _warned.add((module_name, name))
        logger.warning('settings module %s: %s is %s', module_name, name, advice)


class Settings:
    """Attribute access to the merged settings; see the module docstring."""

    def __init__(self) -> None:
        self._values: Optional[dict[str, Any]] = None
        self._overrides: list[dict[str, Any]] = []
        self._module: Optional[types.ModuleType] = None
        self._fresh = False
        #: Changes whenever the values may have changed (read for every message,
        #: so a plain attribute).
        self.generation = next(_generations)
        #: Where the settings module's name comes from, for error messages.
        self.source = ENVIRONMENT_VARIABLE

    def __getattr__(self, name: str) -> Any:
        if name.startswith('_'):
            raise AttributeError(name)
        values = self._load()
        for layer in reversed(self._overrides):
            if name in layer:
                return layer[name]
        try:
            return values[name]
        except KeyError:
            raise AttributeError('Kale has no setting %r' % (name,)) from None

    def _load(self) -> dict[str, Any]:
        if self._values is None:
            values = _public_names(default_settings)
            module_name = os.environ.get(ENVIRONMENT_VARIABLE, '').strip()
            self._module = None
            if module_name:
                self._module = _import_settings_module(module_name, self._fresh, self.source)
                own = _public_names(self._module)
                warn_unknown(module_name, own, values)
                values.update(own)
            check_settings(values)
            self._values = values
            self._fresh = False
        return self._values

    @property
    def module_name(self) -> Optional[str]:
        """The settings module in use, or None when only defaults apply."""
        self._load()
        return self._module.__name__ if self._module else None

    @property
    def module_dir(self) -> Optional[str]:
        """Directory of the settings module's file, for relative paths in it."""
        self._load()
        path = getattr(self._module, '__file__', None)
        return os.path.dirname(os.path.abspath(path)) if path else None

    def load(self) -> None:
        """Read the settings now, so that a broken module fails at start."""
        self._load()

    def use_module(self, name: str, source: str) -> None:
        """Read the settings from module ``name`` from now on (also in child
        processes, through KALE_SETTINGS_MODULE); errors say it came from ``source``."""
        os.environ[ENVIRONMENT_VARIABLE] = name
        self.reload()
        self.source = source

    def reload(self) -> None:
        """Forget what was read; the next access reads the settings again
        (including a changed ``KALE_SETTINGS_MODULE``), running the settings
        module again."""
        self._values = None
        self._fresh = True
        self._module = None
        self.generation = next(_generations)
        self.source = ENVIRONMENT_VARIABLE

    @contextlib.contextmanager
    def override(self, **values: Any) -> Iterator['Settings']:
        """Temporarily replace some settings (tests, scripts)."""
        check_settings(values)
        self._overrides.append(values)
        self.generation = next(_generations)
        try:
            yield self
        finally:
            self._overrides.remove(values)
            self.generation = next(_generations)


settings = Settings()

T = TypeVar('T')


class PerProcess(Generic[T]):
    """A value built by ``build()`` on first use and kept for this process and
    this generation of the settings: a forked child, or changed settings,
    build a fresh one (clients and connections do not survive a fork)."""

    def __init__(self, build: Callable[[], T]):
        self._build = build
        self._lock = threading.Lock()
        self._held: Optional[tuple[tuple[int, int], T]] = None

    def get(self) -> T:
        key = (os.getpid(), settings.generation)
        with self._lock:
            if self._held is None or self._held[0] != key:
                self._held = (key, self._build())
            return self._held[1]


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
