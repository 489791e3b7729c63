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
    classes, failures = declaring_classes_and_failures(modules, attribute)
    if failures:
        raise error(failures[0][1])
    return classes


def declaring_classes_and_failures(modules: Sequence[str], attribute: str
                                   ) -> tuple[list[type[Task]], list[tuple[str, str]]]:
    """The Task classes of the modules of ``modules`` that could be imported
    and declare ``attribute`` themselves, sorted by path; and the modules
    that could not be imported, each with a line saying why."""
    classes: dict[str, type[Task]] = {}
    failures: list[tuple[str, str]] = []
    for name in modules:
        found, failed = _modules(name)
        failures.extend(failed)
        for module in found:
            for _, value in inspect.getmembers(module, inspect.isclass):
                if issubclass(value, Task) and attribute in value.__dict__ \
                        and value.__module__ == module.__name__:
                    classes[value.task_path()] = value
    return [classes[path] for path in sorted(classes)], failures


def _modules(name: str) -> tuple[list[Any], list[tuple[str, str]]]:
    """The modules of TASK_MODULES entry ``name`` (a package: with every
    module in it), and those that cannot be imported, each with its line."""
    try:
        module = importlib.import_module(name)
    except Exception as exc:
        return [], [(name, 'TASK_MODULES entry %r cannot be imported: %s: %s'
                     % (name, type(exc).__name__, exc))]
    found, failures = [module], []
    for info in pkgutil.walk_packages(getattr(module, '__path__', []), name + '.',
                                      onerror=lambda _: None):
        try:
            found.append(importlib.import_module(info.name))
        except Exception as exc:
            failures.append((info.name, 'module %s (under TASK_MODULES entry %r) cannot be '
                                        'imported: %s: %s'
                             % (info.name, name, type(exc).__name__, exc)))
    return found, failures
