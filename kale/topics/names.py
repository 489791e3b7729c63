"""How topics are named: in code, on SNS, in signed envelopes, in labels
(docs/explanation/internals-workflow.md, "Names")."""
from __future__ import annotations

import hashlib
import re
from typing import Any, Mapping

from kale.config import Config
from kale.exceptions import TopicError

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
