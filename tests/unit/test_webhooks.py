"""The parts of webhooks that need no network: which addresses are refused,
allowed-host entries, the signature and body, Retry-After, the retry
policy's delay, and what a webhook may hold."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import pickle
import socket

import pytest

from kale.exceptions import (
    NonRetriableTaskError,
    WebhookAddressRefused,
    WebhookDeliveryError,
    WebhookError,
    WebhookRejectedError,
)
from kale.retry import RetryPolicy
from kale.webhooks import guard, signing
from kale.webhooks.delivery import DeliverWebhook, judge, retry_after_sec
from kale.webhooks.store import check_headers, check_labels, check_method, check_topic


@pytest.mark.parametrize('address, why', [
    ('127.0.0.1', 'a loopback address'), ('::1', 'a loopback address'),
    ('10.0.0.1', 'a private address'), ('172.16.5.4', 'a private address'),
    ('192.168.1.1', 'a private address'), ('fd12::1', 'a private address'),
    ('169.254.169.254', 'a cloud metadata address'), ('fd00:ec2::254', 'a cloud metadata address'),
    ('169.254.1.1', 'a link-local address'), ('fe80::1', 'a link-local address'),
    ('100.64.0.1', 'a shared address (100.64.0.0/10)'), ('0.0.0.0', 'an unspecified address'),
    ('::', 'an unspecified address'), ('224.0.0.1', 'a multicast address'),
    ('ff02::1', 'a multicast address'), ('240.0.0.1', 'a reserved address'),
    ('::ffff:10.0.0.1', 'a private address'), ('::ffff:169.254.169.254', 'a cloud metadata address'),
    ('2002:a00:1::', 'a private address'), ('64:ff9b::7f00:1', 'a loopback address'),
    ('192.0.2.1', 'a private address'),
])
def test_addresses_that_are_not_public_are_refused_saying_why(address, why):
    assert guard.refusal(address) == why


@pytest.mark.parametrize('address', ['93.184.215.14', '8.8.8.8', '2606:4700::1111',
                                     '::ffff:8.8.8.8'])
def test_public_addresses_pass(address):
    assert guard.refusal(address) is None


def test_a_host_is_refused_if_any_of_its_addresses_is_not_public(monkeypatch):
    monkeypatch.setattr(guard, 'resolve', lambda host, port: ['8.8.8.8', '10.1.2.3'])
    with pytest.raises(WebhookAddressRefused, match=r'hooks\.example \(10\.1\.2\.3\) is a '
                                                    'private address'):
        guard.checked_addresses('hooks.example', 443, ())
    assert guard.checked_addresses('hooks.example', 443, ('Hooks.Example.',)) == [
        '8.8.8.8', '10.1.2.3']


@pytest.mark.parametrize('entry, host, port, allowed', [
    ('127.0.0.1', '127.0.0.1', 8080, True), ('127.0.0.1:8080', '127.0.0.1', 8080, True),
    ('127.0.0.1:8080', '127.0.0.1', 8081, False), ('HOOKS.internal', 'hooks.internal', 80, True),
    ('hooks.internal', 'other.internal', 80, False), ('[::1]:9000', '::1', 9000, True),
    ('::1', '0:0::1', 1, True), ('[::1]:9000', '::1', 9001, False),
])
def test_allowed_host_entries(entry, host, port, allowed):
    assert guard.host_allowed(host, port, [entry]) is allowed


def test_the_resolver_gives_an_address_as_itself_and_a_name_through_getaddrinfo(monkeypatch):
    assert guard.resolve('10.0.0.1', 80) == ['10.0.0.1']
    answers = [(socket.AF_INET6, socket.SOCK_STREAM, 6, '', ('::1', 80, 0, 0)),
               (socket.AF_INET, socket.SOCK_STREAM, 6, '', ('127.0.0.1', 80)),
               (socket.AF_INET, socket.SOCK_STREAM, 6, '', ('127.0.0.1', 80))]
    monkeypatch.setattr(socket, 'getaddrinfo', lambda host, port, type: answers)
    assert guard.resolve('localhost', 80) == ['::1', '127.0.0.1']


@pytest.mark.parametrize('url, problem', [
    ('ftp://example.com/', 'must be http:// or https://'), ('http:///x', 'with a host'),
    ('https://user:pw@example.com/', 'may not carry credentials'),
    ('http://example.com/a b', 'spaces or control characters'), ('', '1 to 2048 characters'),
    ('http://example.com:99999/', 'does not parse'),
])
def test_urls_that_are_not_webhook_urls(url, problem):
    with pytest.raises(WebhookError, match=problem):
        guard.parse_url(url)


def test_a_literal_address_is_judged_when_added_and_a_name_when_delivered():
    with pytest.raises(WebhookAddressRefused, match='a cloud metadata address'):
        guard.check_literal('http://169.254.169.254/latest/', ())
    assert guard.check_literal('http://[::1]:81/x', ('::1',)) == guard.Target('http', '::1', 81)
    assert guard.check_literal('HTTPS://Hooks.Example./x', ()).host == 'hooks.example'


def test_the_signature_is_the_specifications():
    key = bytes(range(32))
    secret = 'whsec_' + base64.b64encode(key).decode()
    body = signing.body('orders', 'evt_1', {'a': 'é'}, 1_700_000_000.5)
    assert json.loads(body) == {'type': 'orders', 'id': 'evt_1',
                                'timestamp': '2023-11-14T22:13:20.500Z', 'data': {'a': 'é'}}
    expected = base64.b64encode(hmac.new(key, b'msg_1.1700000000.' + body,
                                         hashlib.sha256).digest()).decode()
    assert signing.sign(secret, 'msg_1', 1700000000, body) == 'v1,' + expected
    fresh = signing.new_secret()
    assert fresh.startswith('whsec_') and len(signing.secret_key(fresh)) == 32
    with pytest.raises(WebhookError, match='whsec_'):
        signing.secret_key('whsec_c2hvcnQ=')


def test_the_webhook_id_is_one_per_event_and_webhook():
    assert signing.message_id('wh_1', 'evt_1') == signing.message_id('wh_1', 'evt_1')
    assert signing.message_id('wh_1', 'evt_1') != signing.message_id('wh_2', 'evt_1')
    assert signing.message_id('wh_1', 'evt_1') != signing.message_id('wh_1', 'evt_2')


def test_retry_after_in_seconds_or_as_a_date():
    now = 1_700_000_000.0
    assert retry_after_sec('120', now) == 120
    assert retry_after_sec('Tue, 14 Nov 2023 22:14:20 GMT', now) == 60
    assert retry_after_sec('Tue, 14 Nov 2023 22:00:00 GMT', now) == 0
    assert retry_after_sec(None, now) is None
    assert retry_after_sec('soon', now) is None
    assert retry_after_sec('-5', now) is None


def test_answers_are_judged_by_status():
    assert judge(204, 3, '', 'HTTP 204 in 3 ms', None) == {'status': 204, 'latency_ms': 3,
                                                           'answer': ''}
    for status in (408, 429, 500, 503, 599):
        with pytest.raises(WebhookDeliveryError) as raised:
            judge(status, 3, 'x', 'HTTP %d' % status, 7.0)
        assert raised.value.retry_after_sec == 7.0
    for status in (400, 401, 404, 410, 301, 600):
        with pytest.raises(WebhookRejectedError):
            judge(status, 3, 'x', 'HTTP %d' % status, None)
    assert issubclass(WebhookRejectedError, NonRetriableTaskError)


def test_the_retry_waits_what_the_failure_asked_for_within_sqs_limits():
    from kale.conf import settings
    from kale.message import Message
    from kale.worker.runner import retry_decision
    asked = WebhookDeliveryError('HTTP 503', retry_after_sec=37.2)
    message = Message(task_id='t1', task_name=DeliverWebhook.task_path())
    assert retry_decision(DeliverWebhook, message, asked, settings.config) == (None, 38)
    assert RetryPolicy().delay_sec(0, exc=WebhookDeliveryError('x', 5000)) == 900
    assert RetryPolicy(delay_multiple_sec=60).delay_sec(1, exc=WebhookDeliveryError('x')) == 120
    plain = retry_decision(DeliverWebhook, message, WebhookDeliveryError('x'), settings.config)
    assert plain == (None, DeliverWebhook.retry_policy().delay_sec(0))
    copy = pickle.loads(pickle.dumps(asked))             # from a TASK_ISOLATION child
    assert (str(copy), copy.retry_after_sec) == ('HTTP 503', 37.2)


def test_the_time_limit_follows_the_timeout_setting(app):
    from kale.conf import settings
    with settings.override(WEBHOOK_TIMEOUT_SEC=20):     # the class: the default app's
        assert DeliverWebhook.time_limit == 25
    task = DeliverWebhook()
    task.app = app.replace(WEBHOOK_TIMEOUT_SEC=30)      # a run: its app's
    assert task.time_limit == 35


@pytest.mark.parametrize('check, value, problem', [
    (check_topic, '', 'topic'), (check_topic, 'a b', 'topic'), (check_topic, 'x' * 256, 'topic'),
    (check_method, 'DELETE', 'one of POST, PUT, GET'),
    (check_headers, {'Bad Name': 'x'}, 'not a valid HTTP header name'),
    (check_headers, {'Webhook-Signature': 'x'}, 'set by Kale itself'),
    (check_headers, {'Host': 'x'}, 'set by Kale itself'),
    (check_headers, {'X-A': 'a\r\nX-B: b'}, 'without line breaks'),
    (check_headers, ['x'], 'mapping'), (check_labels, {'bad key': 'x'}, 'KEY=VALUE'),
    (check_labels, {'k': 1}, 'KEY=VALUE'),
])
def test_what_a_webhook_may_not_hold(check, value, problem):
    with pytest.raises(WebhookError, match=problem):
        check(value)


def test_what_a_webhook_may_hold():
    assert check_topic('orders.created:v1') == 'orders.created:v1'
    assert check_method('put') == 'PUT'
    assert check_headers({'Authorization': 'Bearer x'}) == {'Authorization': 'Bearer x'}
    assert check_labels({'tenant': 't1'}) == {'tenant': 't1'}


def test_fanout_and_the_delivery_task_import_neither_httpx_nor_sqlalchemy():
    """The topics' subscriber imports the fan-out; a worker resolves the task:
    neither pays for httpx, nor needs the records' SQLAlchemy, until used."""
    import subprocess
    import sys

    from tests.support.endpoint import ROOT, subprocess_env
    script = ('import sys; from kale.webhooks import delivery, fanout; '
              'print(sorted({"httpx", "httpcore", "sqlalchemy"} & set(sys.modules)))')
    result = subprocess.run([sys.executable, '-c', script], cwd=ROOT, env=subprocess_env(),
                            capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == '[]', result.stderr
