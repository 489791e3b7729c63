"""Finding the task class a message names, under ``TASK_MAPPER`` and
``TASK_MODULES``, once per name (docs/explanation/internals-top.md, "The registry")."""
from __future__ import annotations

import importlib
import logging
import threading
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from kale.config import Config
from kale.exceptions import DecodeError, KaleError
from kale.executors.catalog import PREFIX as EXECUTOR_PREFIX
from kale.task import Task
from kale.topics.names import Subscriptions, signed_for, topic_of

if TYPE_CHECKING:
    from kale.app import App

logger = logging.getLogger(__name__)

#: Modules of the tasks Kale itself publishes (webhook deliveries and their
#: fan-out), allowed whatever TASK_MODULES says.
BUILTIN_TASK_MODULES = ('kale.webhooks',)
#: The webhooks' fan-out, a feature loaded by path when webhooks are on.
WEBHOOK_FANOUT = 'kale.webhooks.fanout'

#: Resolved classes kept before the cache starts again (a bound on memory,
#: since task names come from the wire).
CACHE_SIZE = 1000


class Registry:
    """The task classes messages name, under one app's TASK_MAPPER and
    TASK_MODULES, resolved once each; its topic subscribers, executor
    programs and webhooks are the app's."""

    def __init__(self, config: Config, app: 'App'):
        self.config = config
        self.app = app
        self.mapper: Mapping[str, str] = config.TASK_MAPPER or {}
        self.modules: Sequence[str] = config.TASK_MODULES or ()
        self._lock = threading.Lock()
        self._resolved: dict[str, type[Task]] = {}
        self._topics: Optional[tuple[Optional[Subscriptions]]] = None

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

    def topics_of(self, queue: str) -> frozenset[str]:
        """The topics (signed names) ``queue`` subscribes to: through
        TASK_MODULES' subscribers, and on ``WEBHOOK_QUEUE`` every topic with
        active webhooks (empty, and logged, when they cannot be found)."""
        subscriptions = self._subscriptions()
        signed = subscriptions.signed_names(queue) if subscriptions is not None else frozenset()
        webhooks = self._webhook_topics(queue)
        return signed | {signed_for(self.config, topic) for topic in webhooks} if webhooks \
            else signed

    def subscriber(self, task_name: str, queue: str) -> type[Task]:
        """The task class that runs ``queue``'s copy of an event of the topic
        ``task_name`` names: its subscriber there, else on ``WEBHOOK_QUEUE``
        the webhooks' fan-out; DecodeError (``unknown_task``) when none does."""
        topic = topic_of(task_name)
        subscriptions = self._subscriptions()
        found = subscriptions.subscriber(topic, queue) if subscriptions is not None else None
        if found is not None:
            return found.task_class
        if topic in self._webhook_topics(queue):
            fanout: type[Task] = importlib.import_module(WEBHOOK_FANOUT).WebhookFanout
            return fanout
        raise DecodeError(DecodeError.UNKNOWN_TASK, 'no task of TASK_MODULES subscribes to '
                          '%s on queue %r' % (task_name, queue))

    def _webhook_topics(self, queue: str) -> frozenset[str]:
        """The topics with active webhooks, on WEBHOOK_QUEUE with records on."""
        if not self.config.RECORDS_URL or queue != self.config.WEBHOOK_QUEUE:
            return frozenset()
        try:
            topics: frozenset[str] = importlib.import_module(WEBHOOK_FANOUT).webhook_topics(
                self.app)
        except KaleError as exc:
            logger.error('the topics with webhooks cannot be read: %s', exc)
            return frozenset()
        return topics

    def _subscriptions(self) -> Optional[Subscriptions]:
        if self._topics is None:
            try:
                self._topics = (self.app.subscriptions,)
            except KaleError as exc:
                logger.error('topic subscribers cannot be found, no queue accepts events: %s',
                             exc)
                self._topics = (None,)
        return self._topics[0]

    def _resolve(self, task_name: str) -> type[Task]:
        target = self.mapper.get(task_name, task_name)
        if target.startswith(EXECUTOR_PREFIX):     # a program of the executor directory
            from kale.executors.task import executor_task
            return executor_task(target[len(EXECUTOR_PREFIX):], checked=False, app=self.app)
        if not (allowed(target, self.modules) or allowed(target, BUILTIN_TASK_MODULES)):
            raise DecodeError(DecodeError.UNKNOWN_TASK, 'task %r is outside TASK_MODULES; its '
                              'module was not imported' % (target,))
        found, problem = import_path(target)
        if not problem and not (isinstance(found, type) and issubclass(found, Task)):
            problem = 'is not a kale Task class'
        if problem:
            raise DecodeError(DecodeError.UNKNOWN_TASK, 'task %r %s' % (task_name, problem))
        return found


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
