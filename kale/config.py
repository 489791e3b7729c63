"""The configuration: every setting of ``kale.default_settings``, typed, parsed and
checked once, a wrong value one line naming it, and the objects settings name by dotted
paths (docs/explanation/internals-top.md, "Settings and the configuration")."""
from __future__ import annotations

import copy
import dataclasses
import difflib
import importlib
import logging
import os
import sys
import types
from collections.abc import Mapping
from typing import Any, Optional

from kale.default_settings import TABLE, Settings
from kale.exceptions import ImproperlyConfigured

ENVIRONMENT_VARIABLE = 'KALE_SETTINGS_MODULE'

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, eq=False)
class Config(Settings):
    """Every setting, checked: a field per row of the table in
    :mod:`kale.default_settings` (its meaning is there). Build with
    :meth:`load`, :meth:`from_values` or :meth:`replace`."""

    #: The application's own UPPER_CASE names from the settings module.
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: The settings module read, or None when only defaults (and values) apply.
    module_name: Optional[str] = None
    #: Directory of the settings module's file, for relative paths in it.
    module_dir: Optional[str] = None
    #: The App that owns it (each has its own copy; the settings' own: the
    #: default app). kale.hooks.load_feature_hooks reads it for kale/worker/.
    _owner: Any = dataclasses.field(default=None, init=False, repr=False)
    @classmethod
    def from_values(cls, values: Mapping[str, Any], module_name: Optional[str] = None,
                    module_dir: Optional[str] = None) -> 'Config':
        """The defaults with ``values`` over them, checked. A name that is not
        a setting is kept in :attr:`extra`."""
        merged = defaults()
        merged.update(values)
        check_settings(merged)
        own = {name: merged.pop(name) for name in list(merged) if name not in SETTING_NAMES}
        return cls(extra=types.MappingProxyType(own), module_name=module_name,
                   module_dir=module_dir, **_tuples(merged))

    @classmethod
    def load(cls, module_name: Optional[str] = None, source: str = ENVIRONMENT_VARIABLE,
             fresh: bool = False) -> 'Config':
        """The defaults, then the settings module ``module_name`` (by default
        the one ``KALE_SETTINGS_MODULE`` names); with ``fresh``, an imported
        module is run again (settings modules often read the environment).
        Errors name ``source``, where the module's name came from."""
        if module_name is None:
            module_name = os.environ.get(ENVIRONMENT_VARIABLE, '').strip()
        if not module_name:
            return cls.from_values({})
        module = _import_settings_module(module_name, fresh, source)
        own = _public_names(module)
        warn_unknown(module_name, own, defaults())
        path = getattr(module, '__file__', None)
        return cls.from_values(own, module_name=module.__name__,
                               module_dir=os.path.dirname(os.path.abspath(path)) if path else None)

    def replace(self, **values: Any) -> 'Config':
        """A copy with ``values`` changed, checked like the rest."""
        check_settings(values)
        kale_values = _tuples({name: value for name, value in values.items()
                               if name in SETTING_NAMES})
        own = {name: value for name, value in values.items() if name not in SETTING_NAMES}
        if own:
            kale_values['extra'] = types.MappingProxyType({**self.extra, **own})
        return dataclasses.replace(self, **kale_values)

    def get(self, name: str) -> Any:
        """A setting (or the application's own name) by name; AttributeError
        names an unknown one."""
        if name in SETTING_NAMES:
            return getattr(self, name)
        try:
            return self.extra[name]
        except KeyError:
            raise AttributeError('Kale has no setting %r' % (name,)) from None


#: The settings, in the order of the table.
SETTING_NAMES = frozenset(TABLE)
#: Settings whose default is a tuple: a list given for one is kept as a tuple.
_SEQUENCES = tuple(name for name, field in TABLE.items()
                   if isinstance(field.metadata['default'], tuple))


def check_settings(values: Mapping[str, Any]) -> None:
    """Raise ImproperlyConfigured, in one line naming it, for the first
    setting of ``values`` whose value fails its check in the table."""
    for name, field in TABLE.items():
        if name in values:
            problem = field.metadata['check'](values[name])
            if problem:
                raise ImproperlyConfigured('setting %s %s, got %r' % (name, problem, values[name]))


def _tuples(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with a list given for a tuple setting made a tuple."""
    for name in _SEQUENCES:
        if isinstance(values.get(name), list):
            values[name] = tuple(values[name])
    return values


def defaults() -> dict[str, Any]:
    """Every setting's default (a fresh dict)."""
    return {name: copy.copy(field.metadata['default']) for name, field in TABLE.items()}


def _public_names(module: types.ModuleType) -> dict[str, Any]:
    return {name: getattr(module, name) for name in dir(module)
            if name.isupper() and not name.startswith('_')}


def _import_settings_module(name: str, fresh: bool, source: str) -> types.ModuleType:
    """Import the settings module; with ``fresh``, run it again if already
    imported. Errors name ``source``, where the module's name came from."""
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
    'TIMESTAMP_FUNC': 'messages carry time.time() as their send and publish times',
    'PUBLISHER_STR_FUNC': 'messages carry the publishing process\'s id (host:pid@start)',
    'RESET_TIMEOUT_THRESHOLD': 'a task that no longer fits its batch\'s visibility timeout is '
                               'released for a later batch, not started',
    'SQS_QUEUE_TAG_FUNCTION': 'create and tag queues with your infrastructure code and set '
                              'CREATE_MISSING_QUEUES = False',
}

_warned: set[tuple[str, str]] = set()


def warn_unknown(module_name: str, own: dict[str, Any], known: dict[str, Any]) -> None:
    """Warn once per name about an unknown setting that looks misspelt, or
    that the original Kale had (others are the application's own)."""
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
