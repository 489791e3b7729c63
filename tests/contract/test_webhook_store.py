"""The webhooks' facet's contract (kale.store.webhooks.WebhookStore), on
every store: rows kept as given, listed oldest first by topic and activity,
enabled and disabled with their new MAC, removed once."""
from __future__ import annotations


def row(webhook_id: str, topic: str, created_at: float, active: int = 1) -> dict:
    return {'id': webhook_id, 'topic': topic, 'url': 'https://example.com/%s' % webhook_id,
            'method': 'POST', 'headers': {'X-Team': 'sealed:abc'}, 'labels': {'tenant': 'a'},
            'secret': 'sealed:secret', 'mac': 'w2:mac', 'active': active,
            'created_at': created_at, 'updated_at': created_at}


def test_rows_are_kept_as_given_and_listed_oldest_first(store):
    hooks = store.webhooks
    hooks.add(row('wh_b', 'orders', 2.0))
    hooks.add(row('wh_a', 'orders', 2.0))
    hooks.add(row('wh_c', 'users', 1.0, active=0))
    assert [r['id'] for r in hooks.rows()] == ['wh_c', 'wh_a', 'wh_b']
    assert [r['id'] for r in hooks.rows('orders')] == ['wh_a', 'wh_b']
    assert [r['id'] for r in hooks.rows(active_only=True)] == ['wh_a', 'wh_b']
    assert hooks.rows('users', active_only=True) == []
    assert hooks.row('wh_a') == row('wh_a', 'orders', 2.0)
    assert hooks.row('wh_missing') is None


def test_a_row_given_back_is_a_copy(store):
    store.webhooks.add(row('wh_a', 'orders', 1.0))
    store.webhooks.row('wh_a')['labels']['tenant'] = 'changed'
    assert store.webhooks.row('wh_a')['labels'] == {'tenant': 'a'}


def test_enable_and_disable_write_the_new_mac(store):
    hooks = store.webhooks
    hooks.add(row('wh_a', 'orders', 1.0))
    assert hooks.set_active('wh_a', False, 'w2:new', 5.0)
    found = hooks.row('wh_a')
    assert (found['active'], found['mac'], found['updated_at']) == (0, 'w2:new', 5.0)
    assert found['created_at'] == 1.0
    assert hooks.set_active('wh_a', True, 'w2:again', 6.0) and hooks.row('wh_a')['active'] == 1
    assert not hooks.set_active('wh_missing', True, 'w2:x', 6.0)


def test_a_webhook_is_removed_once(store):
    store.webhooks.add(row('wh_a', 'orders', 1.0))
    assert store.webhooks.remove('wh_a')
    assert not store.webhooks.remove('wh_a')
    assert store.webhooks.rows() == []
