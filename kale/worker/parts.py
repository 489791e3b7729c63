"""Turning settings into a worker's parts: its selector, timeout, hooks and key.

Each function reads one setting and refuses a wrong value with one
ImproperlyConfigured line naming it, so a worker fails at start, not at its
first message.
"""
from __future__ import annotations

from typing import Any, Sequence

from kale.codec import get_codec
from kale.conf import import_string, resolve_callable, settings
from kale.exceptions import ImproperlyConfigured
from kale.hooks import SettingsHooks, WorkerHooks, feature_hooks, load_hooks
from kale.queue_selector import SelectQueueBase
from kale.timeout import BaseTimeout


def load_selector(given: Any = None) -> type[SelectQueueBase]:
    """``given``, or the ``QUEUE_SELECTOR`` setting, as a selector class."""
    found = given or settings.QUEUE_SELECTOR
    if isinstance(found, str):
        found = import_string(found, 'QUEUE_SELECTOR')
    if not (isinstance(found, type) and issubclass(found, SelectQueueBase)):
        raise ImproperlyConfigured('QUEUE_SELECTOR must name a kale.queue_selector.'
                                   'SelectQueueBase subclass, got %r' % (found,))
    return found


def load_timeout(default: type[BaseTimeout]) -> type[BaseTimeout]:
    """The ``TASK_TIMEOUT_CLASS`` setting, or ``default`` when it is empty."""
    found = settings.TASK_TIMEOUT_CLASS or default
    if isinstance(found, str):
        found = import_string(found, 'TASK_TIMEOUT_CLASS')
    if not (isinstance(found, type) and issubclass(found, BaseTimeout)):
        raise ImproperlyConfigured('TASK_TIMEOUT_CLASS must name a kale.timeout.BaseTimeout '
                                   'subclass, got %r' % (found,))
    return found


def load_worker_hooks(given: Sequence[Any]) -> list[WorkerHooks]:
    """``ON_WORKER_STARTUP``/``ON_WORKER_SHUTDOWN`` first, then the hooks of
    features turned on (records, metrics, tracing), then ``WORKER_HOOKS``,
    then the hooks given to the worker."""
    startup = resolve_callable(settings.ON_WORKER_STARTUP, 'ON_WORKER_STARTUP')
    shutdown = resolve_callable(settings.ON_WORKER_SHUTDOWN, 'ON_WORKER_SHUTDOWN')
    hooks: list[WorkerHooks] = []
    if startup is not None or shutdown is not None:
        hooks.append(SettingsHooks(startup, shutdown))
    return hooks + load_hooks(feature_hooks() + list(settings.WORKER_HOOKS or ()) + list(given),
                              WorkerHooks, 'WORKER_HOOKS')


def check_codec() -> None:
    """Build the codec now, so that a missing or bad key (signing or
    encryption) fails at start, not at the first message. (The broker refuses
    weak keys for remote queues.)"""
    get_codec()
