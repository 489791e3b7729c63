"""Finding task classes by what they declare, in the modules ``TASK_MODULES``
names (packages with every module in them): the topics' subscribers
(``subscribes``) and the periodic tasks (``schedule``). Only a class that
declares the attribute itself counts, not one that inherits it."""
from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any, Sequence

from kale.exceptions import KaleError
from kale.task import Task


def declaring_classes(modules: Sequence[str], attribute: str,
                      error: type[KaleError]) -> list[type[Task]]:
    """The Task classes of ``modules`` that declare ``attribute`` themselves,
    sorted by path; ``error`` for a module that cannot be imported."""
    classes: dict[str, type[Task]] = {}
    for name in modules:
        for module in _modules(name, error):
            for _, value in inspect.getmembers(module, inspect.isclass):
                if issubclass(value, Task) and attribute in value.__dict__ \
                        and value.__module__ == module.__name__:
                    classes[value.task_path()] = value
    return [classes[path] for path in sorted(classes)]


def _modules(name: str, error: type[KaleError]) -> list[Any]:
    try:
        module = importlib.import_module(name)
    except Exception as exc:
        raise error('TASK_MODULES entry %r cannot be imported: %s: %s'
                    % (name, type(exc).__name__, exc)) from None
    found = [module]
    for info in pkgutil.walk_packages(getattr(module, '__path__', []), name + '.'):
        try:
            found.append(importlib.import_module(info.name))
        except Exception as exc:
            raise error('module %s (under TASK_MODULES entry %r) cannot be imported: %s: %s'
                        % (info.name, name, type(exc).__name__, exc)) from None
    return found
