"""Publishing events: one SNS Publish (or PublishBatch) per event, whatever
the number of subscribers (docs/explanation/internals-workflow.md, "Publishing")."""
from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional

from kale.default import default_app
from kale.exceptions import PublishError, TopicError
from kale.ids import random_id
from kale.message import Message
from kale.publish_checks import check_labels
from kale.topics.names import check_topic, event_context, label_attributes, signed_for, sns_name, task_name

if TYPE_CHECKING:
    from kale.app import App


def topic_arn(backend: Any, app: 'App', topic: str) -> str:
    """The topic's ARN. With AUTO_CREATE_TOPICS the topic is created (and,
    once per app and backend, the subscriptions of TASK_MODULES'
    subscribers); without it a missing topic is a TopicError saying what to run."""
    name = sns_name(app.config, topic)
    if app.config.AUTO_CREATE_TOPICS:
        app.part(('topics-synced', id(backend)), lambda: _sync(app))
        return str(backend.create_topic(name))
    arn = backend.find_topic(name)
    if arn is None:
        raise TopicError('topic %r (SNS name %r) does not exist: run `kale topics sync`, or turn '
                         'AUTO_CREATE_TOPICS on' % (topic, name))
    return str(arn)


def _sync(app: 'App') -> bool:
    from kale.topics.sync import sync
    if app.subscriptions.subscribers:
        sync(app)
    return True


def _event_message(topic: str, event: Any, labels: Mapping[str, str]) -> Message:
    try:
        json.dumps(event)
    except (TypeError, ValueError) as exc:
        raise PublishError('topic %s: the event is not JSON-serializable: %s' % (topic, exc)) \
            from None
    event_id = random_id()
    return Message(task_id=event_id, task_name=task_name(topic), args=(event,), kwargs={},
                   published_at=time.time(), context=event_context(topic, event_id, labels))


def publish(topic: str, event: Any, labels: Optional[Mapping[str, Any]] = None,
            app: Optional['App'] = None) -> str:
    """Publish ``event`` to every subscriber of ``topic`` (one SNS Publish)
    in ``app``'s deployment (by default the default app's); returns the
    event's id."""
    return publish_batch(topic, [event], labels, app=app)[0]


def publish_batch(topic: str, events: Iterable[Any],
                  labels: Optional[Mapping[str, Any]] = None,
                  app: Optional['App'] = None) -> list[str]:
    """Publish several events to ``topic`` (SNS PublishBatch, ten a
    request), all with the same ``labels``; their event ids, in order."""
    app = app or default_app()
    check_topic(topic)
    checked = check_labels(task_name(topic), labels)
    attributes = label_attributes(topic, checked)
    messages = [_event_message(topic, event, checked) for event in events]
    if not messages:
        return []
    signed = signed_for(app.config, topic)
    bodies = [app.codec.to_outgoing(message, signed).body for message in messages]
    backend = app.topics
    arn = topic_arn(backend, app, topic)
    if len(bodies) == 1:
        backend.publish(arn, bodies[0], attributes)
    else:
        backend.publish_batch(arn, [(body, attributes) for body in bodies])
    return [message.task_id for message in messages]
