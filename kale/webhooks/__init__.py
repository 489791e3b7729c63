"""Webhooks: the events of a topic delivered over HTTP, signed as the
Standard Webhooks specification says (https://www.standardwebhooks.com/).

Webhooks are kept in the task records (``RECORDS_URL``)::

    from kale import webhooks

    hook = webhooks.add('orders', 'https://example.com/hooks/orders',
                        labels={'tenant': 't1'})
    hook.secret                         # whsec_...: shown only now
    webhooks.list_webhooks('orders')    # without their secrets
    webhooks.set_active(hook.id, False)
    webhooks.remove(hook.id)

Each event of the topic becomes one task, :class:`~kale.webhooks.delivery.DeliverWebhook`,
per matching webhook (:func:`kale.webhooks.fanout.deliver`), retried as
tasks are. Modules: :mod:`~kale.webhooks.store` (the table), ``signing``
(the signature and the body), ``guard`` (which addresses may be reached),
``sender`` (httpx, imported only by a delivery), ``delivery``, ``fanout``.
``kale webhooks`` and ``/api/webhooks`` manage them.
"""
from __future__ import annotations

from typing import Any

#: What ``from kale import webhooks`` offers, from kale.webhooks.store (imported
#: on first use: it needs SQLAlchemy, the topics that never add a webhook do not).
EXPORTS = ('Webhook', 'add', 'find', 'get', 'list_webhooks', 'remove', 'set_active')


def __getattr__(name: str) -> Any:
    if name in EXPORTS:
        from kale.webhooks import store
        return getattr(store, name)
    raise AttributeError('module %r has no attribute %r' % (__name__, name))


__all__ = list(EXPORTS)
