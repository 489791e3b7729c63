"""Turning settings into a worker's parts: its selector, timeout, hooks and key.

Each function reads one setting and refuses a wrong value with one
ImproperlyConfigured line naming it, so a worker fails at start, not at its
first message.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from kale.broker import Broker
from kale.config import Config, import_string, resolve_callable
from kale.exceptions import ImproperlyConfigured
from kale.hooks import SettingsHooks, WorkerHooks, load_feature_hooks, load_hooks
from kale.queue_config import QueueConfig, TaskQueue
from kale.queue_selector import SelectQueueBase
from kale.timeout import BaseTimeout


def _subclass(found: Any, setting: str, base: type) -> Any:
    """``found`` (a class, or its dotted path) as a subclass of ``base``, or the setting's error."""
    if isinstance(found, str):
        found = import_string(found, setting)
    if not (isinstance(found, type) and issubclass(found, base)):
        raise ImproperlyConfigured('%s must name a %s.%s subclass, got %r'
                                   % (setting, base.__module__, base.__qualname__, found))
    return found


def load_selector(given: Any, config: Config) -> type[SelectQueueBase]:
    """``given``, or ``config``'s ``QUEUE_SELECTOR``, as a selector class."""
    return _subclass(given or config.QUEUE_SELECTOR, 'QUEUE_SELECTOR', SelectQueueBase)


def load_timeout(default: type[BaseTimeout], config: Config) -> type[BaseTimeout]:
    """``config``'s ``TASK_TIMEOUT_CLASS``, or ``default`` when it is empty."""
    return _subclass(config.TASK_TIMEOUT_CLASS or default, 'TASK_TIMEOUT_CLASS', BaseTimeout)


def load_worker_hooks(given: Sequence[Any], config: Config) -> list[WorkerHooks]:
    """``ON_WORKER_STARTUP``/``ON_WORKER_SHUTDOWN`` first, then the hooks of
    features turned on (records, metrics, tracing), built for ``config``,
    then ``WORKER_HOOKS``, then the hooks given to the worker."""
    startup = resolve_callable(config.ON_WORKER_STARTUP, 'ON_WORKER_STARTUP')
    shutdown = resolve_callable(config.ON_WORKER_SHUTDOWN, 'ON_WORKER_SHUTDOWN')
    hooks: list[WorkerHooks] = []
    if startup is not None or shutdown is not None:
        hooks.append(SettingsHooks(startup, shutdown))
    features = [hook for hook in load_feature_hooks(config) if isinstance(hook, WorkerHooks)]
    return hooks + features + load_hooks(list(config.WORKER_HOOKS or ()) + list(given),
                                         WorkerHooks, 'WORKER_HOOKS')


def dead_run_queues(broker: Broker, queues: Sequence[TaskQueue]) -> list[TaskQueue]:
    """The dead-run queues of ``queues`` (what ``kale worker --dead-letters`` serves)."""
    if not broker.dead_letters:
        raise ImproperlyConfigured('--dead-letters: ENABLE_DEAD_LETTER_QUEUE is off, so no task '
                                   'has dead runs to serve')
    return [broker.dead_run_queue(queue) for queue in queues]


def choose_queues(config: QueueConfig, names: Optional[Sequence[str]]) -> list[TaskQueue]:
    """The queues named (each once; unknown ones refused), or every configured queue."""
    if not names:
        return list(config.values())
    return [config.get_queue(name, who='--queues') for name in dict.fromkeys(names)]
