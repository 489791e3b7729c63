"""The executor directory: which programs may run, and each one's settings
(``executors.yaml``: docs/explanation/internals-workflow.md, "The executor directory")."""
from __future__ import annotations

import dataclasses
import os
import re
import stat
from typing import Any, Callable, Optional

from kale.exceptions import ExecutorError, ImproperlyConfigured

#: How a message names an executor program's task: this, then the method.
PREFIX = 'executor:'
#: What a method name may be.
METHOD_NAME = re.compile(r'[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}')
#: The optional settings file in the directory.
SETTINGS_FILE = 'executors.yaml'
#: The environment every program gets from the worker's, when set.
BASE_ENV = ('PATH', 'HOME', 'LANG', 'LC_ALL', 'TZ', 'TMPDIR')


@dataclasses.dataclass(frozen=True)
class MethodSettings:
    """A method's settings: ``executors.yaml``'s, else its defaults, else Kale's."""

    time_limit: float = 30.0
    max_retries: Optional[int] = 4
    queue: str = 'default'
    env: tuple[str, ...] = ()


def check_name(method: str) -> str:
    """``method`` when it is a valid method name; ExecutorError (``unknown_method``) otherwise."""
    if not isinstance(method, str) or not METHOD_NAME.fullmatch(method):
        raise ExecutorError('unknown_method: %r is not a method name ([A-Za-z0-9._-], 1 to 128 '
                            'characters, not starting with a dot)' % (str(method)[:140],))
    return method


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


#: Each key of a method's settings: whether a value is good, what it becomes, what it must be.
_CHECKS: dict[str, tuple[Callable[[Any], bool], Callable[[Any], Any], str]] = {
    'time_limit': (lambda value: _number(value) and 0 < value <= 12 * 3600, float,
                   'seconds from 0 to 43200'),
    'max_retries': (lambda value: value is None or (_number(value) and isinstance(value, int)
                                                    and value >= 0),
                    lambda value: value, 'a whole number from 0, or null'),
    'queue': (lambda value: isinstance(value, str) and bool(value), str, 'a queue name'),
    'env': (lambda value: isinstance(value, list) and all(isinstance(n, str) and n for n in value),
            tuple, 'a list of variable names'),
}


def _checked(key: str, value: Any, where: str) -> Any:
    good, convert, what = _CHECKS[key]
    if not good(value):
        raise ImproperlyConfigured('%s: %s must be %s, got %r' % (where, key, what, value))
    return convert(value)


def _settings(raw: Any, where: str, base: MethodSettings) -> MethodSettings:
    if raw is None:
        return base
    if not isinstance(raw, dict):
        raise ImproperlyConfigured('%s: must be a mapping of %s' % (where, ', '.join(_CHECKS)))
    unknown = sorted(set(raw) - set(_CHECKS))
    if unknown:
        raise ImproperlyConfigured('%s: unknown key %s (known: %s)'
                                   % (where, unknown[0], ', '.join(_CHECKS)))
    return dataclasses.replace(base, **{key: _checked(key, raw[key], where)
                                         for key in _CHECKS if key in raw})


class Catalog:
    """The programs of one executor directory, and their settings."""

    def __init__(self, directory: str):
        if not directory:
            raise ImproperlyConfigured('EXECUTOR_DIR is empty: name the directory of the '
                                       'executor programs (kale worker --executors DIR)')
        real = os.path.realpath(directory)
        if not os.path.isdir(real):
            raise ImproperlyConfigured('EXECUTOR_DIR %s is not a directory' % directory,
                                       public='EXECUTOR_DIR is not a directory')
        self.directory = real
        try:
            self.defaults, self.methods = self._load()
        except ImproperlyConfigured as exc:     # an API caller reads the file's name, not its path
            exc.public = str(exc).replace(os.path.join(real, SETTINGS_FILE), SETTINGS_FILE)
            raise

    def _load(self) -> tuple[MethodSettings, dict[str, MethodSettings]]:
        path = os.path.join(self.directory, SETTINGS_FILE)
        if not os.path.exists(path):
            return MethodSettings(), {}
        import yaml
        try:
            with open(path) as f:
                raw = yaml.safe_load(f) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ImproperlyConfigured('%s cannot be read: %s'
                                       % (path, str(exc).splitlines()[0])) from None
        if not isinstance(raw, dict) or set(raw) - {'defaults', 'methods'}:
            raise ImproperlyConfigured('%s: the top level may hold defaults and methods only'
                                       % path)
        defaults = _settings(raw.get('defaults'), '%s defaults' % path, MethodSettings())
        methods_raw = raw.get('methods') or {}
        if not isinstance(methods_raw, dict):
            raise ImproperlyConfigured('%s: methods must be a mapping of method names' % path)
        methods = {}
        for name, settings in methods_raw.items():
            try:
                check_name(str(name))
            except ExecutorError as exc:
                raise ImproperlyConfigured('%s: %s' % (path, exc)) from None
            methods[str(name)] = _settings(settings, '%s method %s' % (path, name), defaults)
        return defaults, methods

    def settings(self, method: str) -> MethodSettings:
        return self.methods.get(method, self.defaults)

    def program(self, method: str) -> str:
        """The path of the method's program; ExecutorError (``unknown_method``)
        when it is not an executable file inside the directory."""
        check_name(method)
        if method == SETTINGS_FILE:
            raise ExecutorError('unknown_method: %s is the settings file, not a program' % method)
        real = os.path.realpath(os.path.join(self.directory, method))
        if os.path.dirname(real) != self.directory and \
                not real.startswith(self.directory + os.sep):
            raise ExecutorError('unknown_method: %s leads outside the executor directory'
                                % method)
        try:
            info = os.stat(real)
        except OSError:
            raise ExecutorError('unknown_method: no program %s in the executor directory %s'
                                % (method, self.directory)) from None
        if not stat.S_ISREG(info.st_mode) or not os.access(real, os.X_OK):
            raise ExecutorError('unknown_method: %s in the executor directory is not an '
                                'executable file' % method)
        return real

    def environment(self, method: str, extra: dict[str, str]) -> dict[str, str]:
        """The program's environment: the base variables and the method's
        ``env`` names, from the worker's, then ``extra``."""
        names = BASE_ENV + self.settings(method).env
        return {**{name: os.environ[name] for name in names if name in os.environ}, **extra}
