"""Finding the task class a message names.

A message carries its task's path (``module.Class``). :func:`resolve_task`
maps it through ``TASK_MAPPER``, checks it against ``TASK_MODULES`` (a path
outside them is never imported), imports it and checks that it is a
:class:`~kale.task.Task`; the answer is cached per settings generation, so a
worker imports each task once.
"""
from __future__ import annotations

import importlib
import threading
from typing import Any, Sequence

from kale.conf import settings
from kale.exceptions import DecodeError
from kale.task import Task

#: Resolved classes kept before the cache starts again (a bound on memory,
#: since task names come from the wire).
CACHE_SIZE = 1000

_lock = threading.Lock()
_resolved: dict[tuple[int, str], type[Task]] = {}


def resolve_task(task_name: str) -> type[Task]:
    """The Task class a message names, after TASK_MAPPER; DecodeError
    (``unknown_task``) when it cannot be imported or is not a Task."""
    key = (settings.generation, task_name)
    found = _resolved.get(key)
    if found is None:
        found = _resolve(task_name)
        with _lock:
            if len(_resolved) >= CACHE_SIZE:
                _resolved.clear()
            _resolved[key] = found
    return found


def allowed(path: str, prefixes: Sequence[str]) -> bool:
    """Whether ``path`` lies in one of the modules named by ``prefixes`` (all
    paths when there are none)."""
    return not prefixes or any(path == prefix or path.startswith(prefix + '.')
                               for prefix in prefixes)


def _resolve(task_name: str) -> type[Task]:
    mapper = settings.TASK_MAPPER or {}
    target = mapper.get(task_name, task_name)
    if not allowed(target, settings.TASK_MODULES or ()):
        raise DecodeError(DecodeError.UNKNOWN_TASK, 'task %r is outside TASK_MODULES; its '
                          'module was not imported' % (target,))
    found, problem = import_path(target)
    if not problem and not (isinstance(found, type) and issubclass(found, Task)):
        problem = 'is not a kale Task class'
    if problem:
        raise DecodeError(DecodeError.UNKNOWN_TASK, 'task %r %s' % (task_name, problem))
    return found


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
