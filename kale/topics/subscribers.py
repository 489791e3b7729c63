"""Finding the task classes that subscribe to topics
(docs/explanation/internals-workflow.md, "Subscribers and their set-up")."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

from kale.config import Config
from kale.exceptions import TopicError
from kale.queue_config import QueueConfig
from kale.task import Task
from kale.task_modules import declaring_classes
from kale.topics.names import check_topic, signed_for


@dataclasses.dataclass(frozen=True)
class Subscriber:
    """One task class's subscription to one topic."""

    topic: str
    task_class: type[Task]
    queue: str                         # its name in the queue config
    labels: Mapping[str, Any]          # the filter: {} for every event

    @property
    def task_path(self) -> str:
        return self.task_class.task_path()


class Subscriptions:
    """Every subscriber found under one configuration, by topic and by queue."""

    def __init__(self, config: Config, subscribers: list[Subscriber], searched: bool):
        self.config = config
        self.subscribers = subscribers
        #: Whether TASK_MODULES named anything to search.
        self.searched = searched
        self._by_key = {(s.topic, s.queue): s for s in subscribers}
        self._signed: dict[str, frozenset[str]] = {}
        for sub in subscribers:
            self._signed[sub.queue] = self._signed.get(sub.queue, frozenset()) | {
                signed_for(config, sub.topic)}

    def signed_names(self, queue: str) -> frozenset[str]:
        """What events arriving on ``queue`` (its config name) may be signed for."""
        return self._signed.get(queue, frozenset())

    def subscriber(self, topic: str, queue: str) -> Optional[Subscriber]:
        return self._by_key.get((topic, queue))


def find_subscribers(config: Config, queues: QueueConfig) -> Subscriptions:
    """Import TASK_MODULES and collect their subscriber classes; TopicError
    for a bad declaration (a topic name, a queue not configured, two
    subscribers of one topic on one queue)."""
    modules = list(config.TASK_MODULES or ())
    found: dict[tuple[str, str], Subscriber] = {}
    for task_class in declaring_classes(modules, 'subscribes', TopicError):
        topics = task_class.__dict__['subscribes']
        if isinstance(topics, str):
            topics = (topics,)
        labels = getattr(task_class, 'subscription_labels', None) or {}
        if not isinstance(labels, Mapping):
            raise TopicError('task %s: subscription_labels must be a dict, got %r'
                             % (task_class.task_path(), labels))
        task_queue = queues.get_queue(task_class.queue, 'task %s' % task_class.task_path())
        if task_queue.fifo:
            raise TopicError('task %s subscribes to topics on FIFO queue %r: topics deliver to '
                             'standard queues only' % (task_class.task_path(), task_queue.name))
        queue = task_queue.name
        for topic in topics:
            check_topic(topic, 'task %s subscribes to' % task_class.task_path())
            other = found.get((topic, queue))
            if other is not None and other.task_class is not task_class:
                raise TopicError('topic %r: %s and %s both subscribe on queue %r; a queue takes '
                                 'one copy of each event, so give one of them a queue of its own'
                                 % (topic, other.task_path, task_class.task_path(), queue))
            found[(topic, queue)] = Subscriber(topic, task_class, queue, dict(labels))
    return Subscriptions(config, sorted(found.values(), key=lambda s: (s.topic, s.queue)),
                         searched=bool(modules))
