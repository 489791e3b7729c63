"""How topics are named: in code, on SNS, in signed envelopes, in labels; and
the task classes that subscribe to them (docs/explanation/internals-workflow.md,
"Names", "Subscribers and their set-up")."""
from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Any, Mapping, Optional

from kale.config import Config
from kale.exceptions import TopicError
from kale.queue_config import QueueConfig
from kale.task import Task
from kale.task_modules import declaring_classes

#: Task names (and signed queue names) of events start with it.
TOPIC_PREFIX = 'topic:'
TOPIC_NAME = re.compile(r'[A-Za-z0-9_-]{1,200}')
#: The SNS message attribute carrying label KEY, matched by filter policies.
LABEL_ATTRIBUTE = 'kale.label.%s'
LABEL_KEY = re.compile(r'[A-Za-z0-9_.-]{1,64}')
#: SNS carries at most 10 message attributes.
MAX_EVENT_LABELS = 10


def check_topic(name: Any, who: str = 'topic') -> str:
    """``name`` if it is a valid topic name, else TopicError naming it."""
    if not (isinstance(name, str) and TOPIC_NAME.fullmatch(name)):
        raise TopicError('%s %r: a topic name is 1-200 letters, digits, _ or -' % (who, name))
    return name


def sns_name(config: Config, topic: str) -> str:
    """The topic's name on SNS: QUEUE_PREFIX and its name."""
    return (config.QUEUE_PREFIX or '') + topic


def signed_for(config: Config, topic: str) -> str:
    """What an event of ``topic`` is signed for (in place of a queue)."""
    return TOPIC_PREFIX + sns_name(config, topic)


def task_name(topic: str) -> str:
    return TOPIC_PREFIX + topic


def topic_of(name: str) -> str:
    """The topic of an event's task name (``topic:orders`` -> ``orders``)."""
    return name[len(TOPIC_PREFIX):]


def copy_task_id(event_id: str, task_path: str) -> str:
    """The task id of ``task_path``'s copy of event ``event_id``: the same
    for every delivery of that copy, different for each subscriber."""
    return '%s-%s' % (event_id, hashlib.sha256(task_path.encode()).hexdigest()[:8])


#: Keys of an event's signed context: its topic, its id, each of its labels.
CONTEXT_TOPIC = 'kale.topic'
CONTEXT_EVENT = 'kale.event'
CONTEXT_LABEL = 'kale.label.'


def event_context(topic: str, event_id: str, labels: Mapping[str, str]) -> dict[str, str]:
    """What an event carries in its signed context, for its subscribers: its
    topic, its id and its labels (the SNS attributes are not signed)."""
    return {CONTEXT_TOPIC: topic, CONTEXT_EVENT: event_id,
            **{CONTEXT_LABEL + key: value for key, value in labels.items()}}


def event_of(context: Mapping[str, str]) -> tuple[str, str, dict[str, str]]:
    """(topic, event id, labels) from a subscriber's copy's context."""
    labels = {key[len(CONTEXT_LABEL):]: value for key, value in context.items()
              if key.startswith(CONTEXT_LABEL)}
    return context.get(CONTEXT_TOPIC, ''), context.get(CONTEXT_EVENT, ''), labels


def label_attributes(topic: str, labels: Mapping[str, str]) -> dict[str, str]:
    """The SNS message attributes that carry an event's (checked) labels."""
    if len(labels) > MAX_EVENT_LABELS:
        raise TopicError('topic %s: an event carries at most %d labels (SNS message attributes), '
                         'got %d' % (topic, MAX_EVENT_LABELS, len(labels)))
    for key in labels:
        if not LABEL_KEY.fullmatch(key) or '..' in key:
            raise TopicError('topic %s: label key %r of an event must be 1-64 letters, digits, '
                             '_, - or single dots' % (topic, key))
    return {LABEL_ATTRIBUTE % key: value for key, value in labels.items()}


def filter_policy(labels: Mapping[str, Any]) -> dict[str, list[str]]:
    """The SNS filter policy of a subscription limited to ``labels`` (a value
    or a list of accepted values per key)."""
    return {LABEL_ATTRIBUTE % key: [str(v) for v in ([value] if isinstance(value, str) else value)]
            for key, value in labels.items()}


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
