"""An event of a topic becomes one delivery per webhook that wants it:
:class:`WebhookFanout` subscribes WEBHOOK_QUEUE to the topics with webhooks
and :func:`deliver` publishes the deliveries; :func:`send_test` a test one."""
from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any, Mapping, Optional

from kale import internal
from kale.default import default_app
from kale.exceptions import KaleError, NonRetriableTaskError, WebhookError
from kale.ids import random_id
from kale.task import Task
from kale.topics.names import Subscriber, event_of
from kale.webhooks.delivery import DeliverWebhook, RunningSetting

if TYPE_CHECKING:
    from kale.app import App

logger = logging.getLogger(__name__)

#: The event ``kale webhooks test`` delivers.
TEST_EVENT = {'test': True}


def deliver(topic: str, event_id: str, event: Any,
            labels: Optional[Mapping[str, str]] = None, app: Optional['App'] = None) -> list[str]:
    """Publish one delivery of ``event`` (JSON-ready) to each active webhook
    of ``topic`` in ``app`` (by default the default app) whose filter
    ``labels`` satisfy; their task ids (none without RECORDS_URL: webhooks
    are kept there). WebhookError, and nothing published, for an event JSON
    cannot encode."""
    app = app or default_app()
    if not app.config.RECORDS_URL:
        return []
    from kale.webhooks import store  # SQLAlchemy, only where webhooks are kept
    hooks = [hook for hook in store.list_webhooks(topic, active_only=True, app=app)
             if hook.matches(labels)]
    if not hooks:
        return []
    try:
        json.dumps(event)
    except (TypeError, ValueError) as exc:
        raise WebhookError('event %s of topic %s cannot be delivered to webhooks: it is not '
                           'JSON (%s)' % (event_id, topic, exc)) from None
    kwargs = {'labels': dict(labels)} if labels else {}
    return _publish(app, [((hook.id, event_id, topic, event), kwargs) for hook in hooks])


def _publish(app: 'App', calls: list[Any]) -> list[str]:
    """Publish deliveries to WEBHOOK_QUEUE, as Kale's own tasks (kale.internal)."""
    config = app.config
    return app.publisher.publish_batch(DeliverWebhook, None, calls,
                                       queue_name=str(config.WEBHOOK_QUEUE),
                                       context=internal.context(config, DeliverWebhook))


def send_test(webhook_id: str, app: Optional['App'] = None) -> str:
    """Publish one delivery of :data:`TEST_EVENT` to the webhook (whatever
    its filter); the task id. WebhookError when it is disabled."""
    from kale.webhooks import store
    app = app or default_app()
    hook = store.get(webhook_id, app)
    if not hook.active:
        raise WebhookError('webhook %s is disabled: enable it first' % hook.id)
    [task_id] = _publish(app, [((hook.id, 'evt_test_' + random_id()[:20], hook.topic,
                                 TEST_EVENT), {})])
    return task_id


#: Seconds the topics with active webhooks are kept before they are read again.
TOPICS_CACHE_SEC = 10.0


class WebhookFanout(Task):
    """The subscriber on ``WEBHOOK_QUEUE`` of every topic that has active
    webhooks: it turns its copy of each event into one delivery per webhook
    (:func:`deliver`). No class declares it; the topics' sync subscribes the
    queue, and the worker runs it for the queue's copies of those topics."""

    queue = RunningSetting(lambda config: str(config.WEBHOOK_QUEUE))
    store_result = True         # the deliveries it published, in its record
    time_limit = 30
    kale_internal = True        # run for a topic's copies, named by their topic

    def run_task(self, event: Any) -> dict[str, Any]:
        context = self.message.context if self.message is not None else {}
        topic, event_id, labels = event_of(context)
        if not topic or not event_id:
            raise NonRetriableTaskError('the event carries no topic or id in its context')
        return {'deliveries': deliver(topic, event_id, event, labels, app=self.app)}


class _Topics:
    """An app's topics with active webhooks, and when they were read."""

    def __init__(self) -> None:
        self.read_at: Optional[float] = None
        self.topics: frozenset[str] = frozenset()


def webhook_topics(app: 'App') -> frozenset[str]:
    """The topics that have active webhooks in ``app``'s records, read at
    most every TOPICS_CACHE_SEC."""
    if not app.config.RECORDS_URL:
        return frozenset()
    now = time.monotonic()
    held = app.part('webhook-topics', _Topics)
    if held.read_at is None or now - held.read_at > TOPICS_CACHE_SEC:
        from kale.webhooks import store
        try:
            topics = frozenset(hook.topic for hook in store.list_webhooks(
                active_only=True, app=app))
        except Exception as exc:    # the records unreachable: keep what was known
            logger.error('the topics with webhooks cannot be read (kept as they were for %.0f '
                         's): %s', TOPICS_CACHE_SEC, str(exc).splitlines()[0] if str(exc) else
                         type(exc).__name__)
            topics = held.topics
        held.read_at, held.topics = now, topics
    return held.topics


def webhook_subscribers(app: 'App') -> list[Subscriber]:
    """A subscription of ``WEBHOOK_QUEUE`` for each topic with active webhooks,
    for the topics' sync (none without RECORDS_URL)."""
    if not app.config.RECORDS_URL:
        return []
    return [Subscriber(topic, WebhookFanout, str(app.config.WEBHOOK_QUEUE), {})
            for topic in sorted(webhook_topics(app))]


def subscription_of(topic: str, app: 'App') -> str:
    """Subscribe ``app``'s WEBHOOK_QUEUE to a new webhook's topic; what came
    of it, in one line (a failure is said, not raised: the webhook is kept,
    and ``kale topics sync`` subscribes later)."""
    from kale.topics.sync import sync
    app.part('webhook-topics', _Topics).read_at = None      # read the topics afresh
    try:
        lines = [line for line in sync(app, queues={str(app.config.WEBHOOK_QUEUE)})
                 if line.startswith(topic + ' ')]
    except KaleError as exc:
        return 'topic %s not subscribed yet (%s): run `kale topics sync`' % (
            topic, str(exc).splitlines()[0])
    return '; '.join(lines) or 'topic %s not subscribed' % topic
