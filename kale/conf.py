"""``kale.settings``: the settings of the default app, read lazily.

``from kale import settings`` gives the one :class:`Settings` object, a view
of a :class:`~kale.config.Config`. Nothing is read at import: the first
attribute access loads the defaults and then the module named by
``KALE_SETTINGS_MODULE``; :meth:`Settings.reload` reads them again, and
:meth:`Settings.override` changes some for a block. The default
:class:`~kale.app.App` is built from :attr:`Settings.config`, so each of
these gives the process a new default app; code that holds an app of its
own is not affected.
"""
from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, Iterator, Optional

from kale.config import ENVIRONMENT_VARIABLE, Config, check_settings
from kale.dotted import import_string, resolve_callable

__all__ = ['ENVIRONMENT_VARIABLE', 'Settings', 'import_string',
           'resolve_callable', 'settings']


class Settings:
    """Attribute access to the current :class:`~kale.config.Config`; see the
    module docstring."""

    def __init__(self) -> None:
        self._base: Optional[Config] = None
        self._config: Optional[Config] = None
        self._overrides: list[dict[str, Any]] = []
        self._fresh = False
        #: Where the settings module's name comes from, for error messages.
        self.source = ENVIRONMENT_VARIABLE
        #: Held while the settings are read: threads that first touch them at
        #: once (publishers started together) must not run the settings
        #: module twice at the same time, and read a half-run one.
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
                    self._base = Config.load(source=self.source, fresh=self._fresh)
                    self._fresh = False
                config = self._base
                for layer in self._overrides:
                    config = config.replace(**layer)
                self._config = config
            return config

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
        self.reload()
        self.source = source

    def reload(self) -> None:
        """Forget what was read; the next access reads the settings again
        (including a changed ``KALE_SETTINGS_MODULE``), running the settings
        module again."""
        self._base = self._config = None
        self._fresh = True
        self.source = ENVIRONMENT_VARIABLE

    @contextlib.contextmanager
    def kept(self) -> Iterator['Settings']:
        """Within the block, reloads, ``use_module`` and overrides may change
        the settings (and KALE_SETTINGS_MODULE); at its end they are back to
        the very configuration they were (tests)."""
        _ = self.config         # read now: what the block leaves behind is not read later
        saved = (self._base, self._config, list(self._overrides), self._fresh, self.source,
                 os.environ.get(ENVIRONMENT_VARIABLE))
        try:
            yield self
        finally:
            (self._base, self._config, self._overrides, self._fresh, self.source,
             module) = saved
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
