"""Finding the task class a message names.

A message carries its task's path (``module.Class``). :func:`resolve_task`
maps it through ``TASK_MAPPER``, checks it against ``TASK_MODULES`` (a path
outside them is never imported), imports it and checks that it is a
:class:`~kale.task.Task`; a :class:`Registry` per configuration keeps the
answers, so a worker imports each task once.
"""
from __future__ import annotations

import importlib
import threading
from typing import Any, Mapping, Optional, Sequence

from kale.conf import settings
from kale.config import Config
from kale.exceptions import DecodeError
from kale.executors.catalog import PREFIX as EXECUTOR_PREFIX
from kale.task import Task

#: Resolved classes kept before the cache starts again (a bound on memory,
#: since task names come from the wire).
CACHE_SIZE = 1000


class Registry:
    """The task classes messages name, under one configuration's TASK_MAPPER
    and TASK_MODULES, resolved once each."""

    def __init__(self, config: Config):
        self.mapper: Mapping[str, str] = config.TASK_MAPPER or {}
        self.modules: Sequence[str] = config.TASK_MODULES or ()
        self._lock = threading.Lock()
        self._resolved: dict[str, type[Task]] = {}

    def resolve(self, task_name: str) -> type[Task]:
        """The Task class a message names, after TASK_MAPPER; DecodeError
        (``unknown_task``) when it cannot be imported or is not a Task."""
        found = self._resolved.get(task_name)
        if found is None:
            found = self._resolve(task_name)
            with self._lock:
                if len(self._resolved) >= CACHE_SIZE:
                    self._resolved.clear()
                self._resolved[task_name] = found
        return found

    def _resolve(self, task_name: str) -> type[Task]:
        target = self.mapper.get(task_name, task_name)
        if target.startswith(EXECUTOR_PREFIX):     # a program of the executor directory
            from kale.executors.task import executor_task
            return executor_task(target[len(EXECUTOR_PREFIX):], checked=False)
        if not allowed(target, self.modules):
            raise DecodeError(DecodeError.UNKNOWN_TASK, 'task %r is outside TASK_MODULES; its '
                              'module was not imported' % (target,))
        found, problem = import_path(target)
        if not problem and not (isinstance(found, type) and issubclass(found, Task)):
            problem = 'is not a kale Task class'
        if problem:
            raise DecodeError(DecodeError.UNKNOWN_TASK, 'task %r %s' % (task_name, problem))
        return found


def get_registry(config: Optional[Config] = None) -> Registry:
    """The registry of ``config`` (by default the settings in force)."""
    config = config or settings.config
    return config.part('registry', lambda: Registry(config))


def resolve_task(task_name: str) -> type[Task]:
    """The Task class a message names, under the settings in force."""
    return get_registry().resolve(task_name)


def allowed(path: str, prefixes: Sequence[str]) -> bool:
    """Whether ``path`` lies in one of the modules named by ``prefixes`` (all
    paths when there are none)."""
    return not prefixes or any(path == prefix or path.startswith(prefix + '.')
                               for prefix in prefixes)


def import_path(path: str) -> tuple[Any, str]:
    """Import ``package.module.Class`` (or a nested class): (it, '') or (None, why not)."""
    parts = path.split('.')
    for split in range(len(parts) - 1, 0, -1):
        module_name = '.'.join(parts[:split])
        try:
            found: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and (module_name == exc.name or module_name.startswith(exc.name + '.')):
                continue
            return None, 'cannot be imported: module %s needs %s' % (module_name, exc)
        except Exception as exc:   # the task's module itself is broken: say how
            return None, 'cannot be imported: module %s raised %s: %s' % (
                module_name, type(exc).__name__, exc)
        for attr in parts[split:]:
            found = getattr(found, attr, None)
            if found is None:
                return None, 'cannot be imported: %s has no %s' % (module_name, attr)
        return found, ''
    return None, 'cannot be imported: no such module'
