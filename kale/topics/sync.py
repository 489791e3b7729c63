"""Where an app's topics live (SNS beside SQS, in memory beside the in-memory
transport), and setting them up: ``kale topics sync``, and workers and publishers on
first use with AUTO_CREATE_TOPICS (docs/explanation/internals-workflow.md, "Subscribers and their set-up")."""
from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any, Collection, Optional, cast

from kale.exceptions import KaleError
from kale.hooks import PublishHooks, WorkerHooks
from kale.topics.names import Subscriber, filter_policy, sns_name

if TYPE_CHECKING:
    from kale.app import App
    from kale.broker import Broker

logger = logging.getLogger(__name__)

#: The webhooks' fan-out (a feature above this layer, loaded by path).
WEBHOOK_FANOUT = 'kale.webhooks.fanout'


def publishing_broker(app: 'App') -> 'Broker':
    """The broker ``app``'s publisher sends with: the in-memory one a test or
    eager mode put in place (:func:`kale.publisher.set_publisher`), else its own."""
    from kale.broker import Broker
    sender = app.publisher.sender
    return sender if isinstance(sender, Broker) else app.broker


def topics_backend(app: 'App') -> Any:
    """The topics of the transport ``app`` publishes to: SNS for SQS, in
    memory for the in-memory transport."""
    transport = publishing_broker(app).transport
    from kale.transport.memory import MemoryTransport
    if isinstance(transport, MemoryTransport):
        from kale.transport.memory_topics import topics_of
        return topics_of(transport)
    from kale.transport.sns import SNSTopics
    from kale.transport.sqs import SQSTransport
    return app.part(('sns', id(transport)), lambda: SNSTopics(cast(SQSTransport, transport),
                                                              config=app.config))


def sync(app: 'App', queues: Optional[Collection[str]] = None) -> list[str]:
    """Create and subscribe what the subscribers of ``app`` need, on its
    topics (only those on ``queues``, config names, when given); one line per
    subscription."""
    config, backend, broker = app.config, app.topics, publishing_broker(app)
    lines: list[str] = []
    allowed: dict[str, list[str]] = {}
    for sub in every_subscriber(app, lines):
        if queues is not None and sub.queue not in queues:
            continue
        arn = backend.create_topic(sns_name(config, sub.topic))
        queue_name = broker.declare(broker.queues[sub.queue])
        allowed.setdefault(queue_name, []).append(arn)
        backend.subscribe(arn, backend.queue_arn(queue_name), filter_policy(sub.labels))
        lines.append('%s -> %s on queue %s%s' % (
            sub.topic, sub.task_path, sub.queue,
            ' (labels %s)' % ', '.join('%s=%s' % item for item in sorted(sub.labels.items()))
            if sub.labels else ''))
    for queue_name, arns in allowed.items():      # every topic of the queue: all are here
        backend.allow_topics(queue_name, sorted(set(arns)))
    return lines


def every_subscriber(app: 'App', notes: Optional[list[str]] = None) -> list[Subscriber]:
    """The subscribers of TASK_MODULES, then the webhooks' fan-out on
    WEBHOOK_QUEUE for each topic with active webhooks (records on), unless a
    class already takes that queue's copy of the topic (said in ``notes``)."""
    subscribers = list(app.subscriptions.subscribers)
    if not app.config.RECORDS_URL:
        return subscribers
    taken = {(sub.topic, sub.queue): sub for sub in subscribers}
    for sub in importlib.import_module(WEBHOOK_FANOUT).webhook_subscribers(app):
        holder = taken.get((sub.topic, sub.queue))
        if holder is None:
            subscribers.append(sub)
        elif notes is not None:
            notes.append('%s: its webhooks get nothing: queue %s (WEBHOOK_QUEUE) takes %s\'s '
                         'copy; set WEBHOOK_QUEUE to a queue no subscriber of it uses'
                         % (sub.topic, sub.queue, holder.task_path))
    return sorted(subscribers, key=lambda s: (s.topic, s.queue))


def describe(app: 'App') -> list[dict[str, Any]]:
    """Each topic ``app``'s subscribers name, with its subscribers (class,
    queue, labels) and the SQS subscriptions SNS has for it (``None`` when
    the topic does not exist yet)."""
    config, backend, broker = app.config, app.topics, publishing_broker(app)
    subscribers = every_subscriber(app)
    found = []
    for topic in sorted({sub.topic for sub in subscribers}):
        arn = backend.find_topic(sns_name(config, topic))
        subs = backend.subscriptions(arn) if arn else None
        found.append({
            'topic': topic, 'sns_name': sns_name(config, topic), 'arn': arn,
            'subscribers': [{'task': s.task_path, 'queue': s.queue,
                             'sqs_name': broker.sqs_name(broker.queues[s.queue]),
                             'labels': dict(s.labels)} for s in subscribers if s.topic == topic],
            'subscriptions': None if subs is None else [
                {'queue': sub['queue_arn'].rsplit(':', 1)[-1], 'filter': sub['filter']}
                for sub in subs]})
    return found


class TopicHooks(PublishHooks, WorkerHooks):
    """With AUTO_CREATE_TOPICS on, a starting worker subscribes its queues to
    their subscribers' topics (as ``kale topics sync`` would, for those queues)."""

    def __init__(self, app: 'App'):
        self.app = app

    @classmethod
    def for_app(cls, app: 'App') -> 'TopicHooks':
        return cls(app)

    def on_worker_startup(self, worker: Any) -> None:
        try:
            if not self.app.subscriptions.subscribers:
                return
            names = {queue.name for queue in getattr(worker, 'queues', [])}
            for line in sync(self.app, queues=names):
                logger.info('topic subscription: %s', line)
        except KaleError as exc:
            logger.error('topics not set up for this worker\'s queues: %s', exc)
