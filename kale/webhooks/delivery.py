"""The task that delivers one event to one webhook: :class:`DeliverWebhook`.
A 2xx is a result, 408/429/5xx/timeouts are retried, anything else fails
for good (docs/explanation/internals-records.md, "A delivery")."""
from __future__ import annotations

import email.utils
import logging
from typing import Any, Callable, Mapping, Optional

from kale.config import Config
from kale.exceptions import (
    ImproperlyConfigured,
    WebhookDeliveryError,
    WebhookRejectedError,
)
from kale.task import Task, running_app
from kale.webhooks import signing

logger = logging.getLogger(__name__)

#: Seconds a delivery's time limit leaves beyond WEBHOOK_TIMEOUT_SEC.
TIME_LIMIT_MARGIN_SEC = 5.0


class RunningSetting:
    """A task attribute read from the running app's settings when asked for
    (the class alone reads the default app's)."""

    def __init__(self, read: Callable[[Config], Any]):
        self.read = read

    def __get__(self, instance: Any, owner: Any) -> Any:
        return self.read(running_app(instance).config)


def retry_after_sec(value: Optional[str], now: float) -> Optional[float]:
    """Seconds a ``Retry-After`` header asks to wait (whole seconds, or an
    HTTP date: its distance from ``now``, 0 if past); None when absent or
    unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if moment is None or moment.tzinfo is None:
        return None
    return max(0.0, moment.timestamp() - now)


def judge(status: int, latency_ms: int, excerpt: str, described: str,
          retry_after: Optional[float]) -> dict[str, Any]:
    """The result of a delivery that got an answer, or its error."""
    if 200 <= status < 300:
        return {'status': status, 'latency_ms': latency_ms, 'answer': excerpt}
    if status in (408, 429) or 500 <= status < 600:
        raise WebhookDeliveryError(described, retry_after)
    raise WebhookRejectedError(described)


class DeliverWebhook(Task):
    """Delivers one event of ``topic`` to the webhook ``webhook_id``
    (published to ``WEBHOOK_QUEUE`` by :mod:`kale.webhooks.fanout`)."""

    queue = 'default'
    time_limit = RunningSetting(
        lambda config: float(config.WEBHOOK_TIMEOUT_SEC) + TIME_LIMIT_MARGIN_SEC)
    store_result = True
    kale_internal = True

    @classmethod
    def labels(cls, webhook_id: str, event_id: str, topic: str, event: Any,
               labels: Optional[Mapping[str, str]] = None) -> Optional[Mapping[str, str]]:
        """The record is labelled with its webhook and topic (the dashboard
        finds a webhook's deliveries by ``webhook=ID``)."""
        return {'webhook': str(webhook_id)[:256], 'topic': str(topic)[:256]}

    def run_task(self, webhook_id: str, event_id: str, topic: str, event: Any,
                 labels: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
        from kale.webhooks import store  # SQLAlchemy, only where deliveries run
        hook = store.find(webhook_id, app=self.app)
        if hook is None or not hook.active:
            state = 'removed' if hook is None else 'disabled'
            logger.info('webhook %s is %s: event %s not delivered', webhook_id, state, event_id)
            return {'skipped': 'webhook %s' % state}
        if not hook.verified:
            raise WebhookRejectedError(
                "webhook %s cannot be used as stored: its row is not signed by this "
                "deployment's MESSAGE_SIGNING_KEY, or it is sealed under a key this process "
                "does not have" % webhook_id)
        if topic != hook.topic:
            raise WebhookRejectedError('webhook %s subscribes to topic %s, not %s: event %s '
                                       'not delivered' % (webhook_id, hook.topic[:200],
                                                          str(topic)[:200], event_id))
        try:
            from kale.webhooks import sender
        except ImportError as exc:
            raise ImproperlyConfigured('webhook deliveries need httpx: pip install '
                                       '"kale-sqs[webhooks]" (%s)' % exc) from exc
        app = self.running
        published = (self.message.published_at if self.message else None) or app.clock.time()
        answer = sender.sender_of(app).send(
            hook.method, hook.url, hook.headers, signing.message_id(webhook_id, event_id),
            hook.secret, signing.body(topic, event_id, event, published),
            float(app.config.WEBHOOK_TIMEOUT_SEC))
        result = judge(answer.status, answer.latency_ms, answer.excerpt, answer.describe(),
                       retry_after_sec(answer.retry_after, app.clock.time()))
        logger.info('webhook %s: event %s delivered, HTTP %d in %d ms', webhook_id, event_id,
                    answer.status, answer.latency_ms)
        return result
