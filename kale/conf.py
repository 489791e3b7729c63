"""``kale.settings``: the settings of the default app, read lazily on first access
and again after :meth:`Settings.reload` (docs/explanation/internals-top.md,
"Settings and the configuration")."""
from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, Callable, Iterator, Mapping, Optional, Union

from kale.config import ENVIRONMENT_VARIABLE, Config, check_settings, import_string, resolve_callable
from kale.exceptions import ImproperlyConfigured

__all__ = ['ENVIRONMENT_VARIABLE', 'Settings', 'import_string',
           'resolve_callable', 'settings']


class Settings:
    """Attribute access to the current :class:`~kale.config.Config`, the default
    app's: nothing is read before the first access."""

    def __init__(self) -> None:
        self._base: Optional[Config] = None
        self._config: Optional[Config] = None
        self._overrides: list[dict[str, Any]] = []
        self._fresh = False
        #: Settings given as values (:meth:`use_values`), in place of a module.
        self._given: Optional[tuple[Any, str, Optional[str]]] = None
        #: Where the settings module's name comes from, for error messages.
        self.source = ENVIRONMENT_VARIABLE
        #: Held while the settings are read: threads touching them at once must
        #: not run the settings module twice, and read a half-run one.
        self._loading = threading.RLock()

    def __getattr__(self, name: str) -> Any:
        if name.startswith('_'):
            raise AttributeError(name)
        return self.config.get(name)

    @property
    def config(self) -> Config:
        """The settings in force: the settings module's, with any overrides."""
        config = self._config
        if config is not None:
            return config
        with self._loading:
            config = self._config
            if config is None:
                if self._base is None:
                    self._base = self._load()
                config = self._base
                for layer in self._overrides:
                    config = config.replace(**layer)
                self._config = config
            return config

    def _load(self) -> Config:
        if self._given is None:
            config = Config.load(source=self.source, fresh=self._fresh)
            self._fresh = False
            return config
        values, source, module_dir = self._given
        try:
            given = values() if callable(values) else values
            return Config.from_values(given, module_name=source, module_dir=module_dir)
        except ImproperlyConfigured as exc:
            raise ImproperlyConfigured('%s: %s' % (source, exc)) from exc

    @property
    def given_values(self) -> bool:
        """Whether the settings come from values (:meth:`use_values`), not a
        settings module."""
        return self._given is not None

    @property
    def module_name(self) -> Optional[str]:
        """The settings module in use, or None when only defaults apply."""
        return self.config.module_name

    @property
    def module_dir(self) -> Optional[str]:
        """Directory of the settings module's file, for relative paths in it."""
        return self.config.module_dir

    def load(self) -> None:
        """Read the settings now, so that a broken module fails at start."""
        _ = self.config

    def use_module(self, name: str, source: str) -> None:
        """Read the settings from module ``name`` from now on (also in child
        processes, through KALE_SETTINGS_MODULE); errors say it came from ``source``."""
        os.environ[ENVIRONMENT_VARIABLE] = name
        self._given = None
        self.reload()
        self.source = source

    def use_values(self, values: Union[Mapping[str, Any], Callable[[], Mapping[str, Any]]],
                   source: str, module_dir: Optional[str] = None) -> None:
        """Take the settings from ``values`` (or what ``values()`` returns when
        first read) over the defaults from now on, instead of a module (Django's
        ``KALE``). ``source`` names them in errors; relative paths in them are
        also looked for under ``module_dir``."""
        self._given = (values if callable(values) else dict(values), source, module_dir)
        self.reload()

    def reload(self) -> None:
        """Forget what was read; the next access reads the settings again
        (including a changed ``KALE_SETTINGS_MODULE``), running the settings
        module again."""
        self._base = self._config = None
        self._fresh = True
        self.source = ENVIRONMENT_VARIABLE if self._given is None else self._given[1]

    @contextlib.contextmanager
    def kept(self) -> Iterator['Settings']:
        """At the block's end the settings (and KALE_SETTINGS_MODULE) are back
        to the very configuration they were, whatever it changed (tests)."""
        _ = self.config         # read now: what the block leaves behind is not read later
        saved = dict(vars(self), _overrides=list(self._overrides))
        module = os.environ.get(ENVIRONMENT_VARIABLE)
        try:
            yield self
        finally:
            vars(self).update(saved)
            if module is None:
                os.environ.pop(ENVIRONMENT_VARIABLE, None)
            else:
                os.environ[ENVIRONMENT_VARIABLE] = module

    @contextlib.contextmanager
    def override(self, **values: Any) -> Iterator['Settings']:
        """Temporarily replace some settings (tests, scripts)."""
        check_settings(values)
        self._overrides.append(values)
        self._config = None
        try:
            yield self
        finally:
            self._overrides.remove(values)
            self._config = None


settings = Settings()
