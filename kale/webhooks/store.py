"""Webhooks kept in the task records database (``RECORDS_URL``), table
``kale_webhooks``: each row MAC'd, its secret and headers sealed at rest, the
secret shown once (docs/explanation/internals-records.md, "The table")."""
from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import re
from typing import TYPE_CHECKING, Any, Mapping, Optional

from kale.clock import SYSTEM_CLOCK, Clock
from kale.codec.keys import signing_keys
from kale.config import Config
from kale.default import default_app
from kale.exceptions import ImproperlyConfigured, WebhookError, WebhookNotFoundError
from kale.ids import random_id
from kale.publish_checks import LABEL_KEY, MAX_LABEL_CHARS, MAX_LABELS
from kale.store.record import iso
from kale.store.sealing import SEALED_KEY, SEALED_PREFIX
from kale.store.webhooks import WebhookStore
from kale.webhooks import guard, signing

if TYPE_CHECKING:
    from kale.app import App

METHODS = ('POST', 'PUT', 'GET')
ID_PREFIX = 'wh_'
MAX_TOPIC_CHARS = 255
MAX_HEADERS = 32
MAX_HEADER_CHARS = 4096
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}")
#: Headers a webhook may not set: the signature's, and those of the request itself.
RESERVED_HEADERS = frozenset({
    'webhook-id', 'webhook-timestamp', 'webhook-signature', 'content-type', 'content-length',
    'host', 'transfer-encoding', 'connection', 'te', 'trailer', 'upgrade', 'keep-alive',
    'proxy-authorization', 'proxy-connection'})
#: Shown in place of a header's value.
HIDDEN = '(hidden)'


@dataclasses.dataclass(frozen=True)
class Webhook:
    """One webhook. ``secret`` (``whsec_...``) and the header values are
    what the worker sends with; ``verified``: the row's MAC verifies."""

    id: str
    topic: str
    url: str
    method: str
    headers: dict[str, str]
    labels: dict[str, str]
    active: bool
    created_at: float
    updated_at: float
    secret: str = dataclasses.field(default='', repr=False)
    verified: bool = True

    def matches(self, labels: Optional[Mapping[str, str]]) -> bool:
        """Whether an event with ``labels`` passes this webhook's filter."""
        given = labels or {}
        return all(given.get(key) == value for key, value in self.labels.items())

    def as_json(self, with_secret: bool = False) -> dict[str, Any]:
        """The webhook as JSON: header values hidden, the secret only when
        asked (once, when it was added)."""
        answer: dict[str, Any] = {
            'id': self.id, 'topic': self.topic, 'url': self.url, 'method': self.method,
            'headers': {name: HIDDEN for name in self.headers}, 'labels': dict(self.labels),
            'active': self.active, 'created_at': iso(self.created_at),
            'updated_at': iso(self.updated_at)}
        if not self.verified:
            answer['verified'] = False
        if with_secret:
            answer['secret'] = self.secret
        return answer


# --- checks -----------------------------------------------------------------------

def check_topic(topic: Any) -> str:
    if not isinstance(topic, str) or not 0 < len(topic) <= MAX_TOPIC_CHARS \
            or any(c.isspace() or not c.isprintable() for c in topic):
        raise WebhookError('a webhook topic must be 1 to %d characters without spaces, got %r'
                           % (MAX_TOPIC_CHARS, str(topic)[:100]))
    return topic


def check_method(method: Any) -> str:
    upper = method.upper() if isinstance(method, str) else method
    if upper not in METHODS:
        raise WebhookError('a webhook method must be one of %s, got %r'
                           % (', '.join(METHODS), str(method)[:20]))
    return str(upper)


def _check_header(name: Any, value: Any) -> None:
    """Refuse a name HTTP does not allow or Kale sets itself, or a value that
    is too long or holds line breaks or control characters."""
    if not (isinstance(name, str) and HEADER_NAME.fullmatch(name)):
        raise WebhookError('webhook header name %r is not a valid HTTP header name'
                           % str(name)[:100])
    if name.lower() in RESERVED_HEADERS:
        raise WebhookError('webhook header %s is set by Kale itself' % name)
    if not isinstance(value, str) or len(value) > MAX_HEADER_CHARS or any(
            (ord(c) < 32 and c != '\t') or ord(c) == 127 for c in value):
        raise WebhookError('webhook header %s must have a value of at most %d characters, '
                           'without line breaks or control characters' % (name,
                                                                           MAX_HEADER_CHARS))


def check_headers(headers: Any) -> dict[str, str]:
    if headers is None:
        return {}
    if not isinstance(headers, Mapping) or len(headers) > MAX_HEADERS:
        raise WebhookError('webhook headers must be a mapping of at most %d names to values'
                           % MAX_HEADERS)
    checked: dict[str, str] = {}
    for name, value in headers.items():
        _check_header(name, value)
        checked[name] = value
    return checked


def check_labels(labels: Any) -> dict[str, str]:
    if labels is None:
        return {}
    if not isinstance(labels, Mapping) or len(labels) > MAX_LABELS:
        raise WebhookError('a webhook label filter must be a mapping of at most %d labels'
                           % MAX_LABELS)
    for key, value in labels.items():
        if not (isinstance(key, str) and LABEL_KEY.fullmatch(key)) or not isinstance(
                value, str) or len(value) > MAX_LABEL_CHARS:
            raise WebhookError('webhook label %r must be KEY=VALUE: a key of 1-64 letters, '
                               'digits or _.:-, a value of at most %d characters'
                               % (str(key)[:100], MAX_LABEL_CHARS))
    return dict(labels)


# --- the store --------------------------------------------------------------------

def _store(app: 'App') -> WebhookStore:
    if not app.config.RECORDS_URL:
        raise ImproperlyConfigured('webhooks are kept in the task records: set RECORDS_URL '
                                   '(sqlite:///... on one machine, postgresql://... for a fleet)')
    return app.store.webhooks


def _mac_keys(config: Config) -> tuple[str, dict[str, bytes]]:
    ring = signing_keys(config=config)
    return ring.current_id, {kid: hmac.new(key, b'kale-webhooks', hashlib.sha256).digest()
                             for kid, key in ring.accepted.items()}


#: The version of what a webhook row's MAC covers (version 1, without it,
#: covered everything but ``active``; such a row is read as it was, and
#: gets a MAC of this version at its next change).
MAC_VERSION = 'w2'


def _digest(key: bytes, row: Mapping[str, Any], secret: str, headers: Mapping[str, str],
            version: str = MAC_VERSION) -> str:
    covered = [row['id'], row['topic'], row['url'], row['method'], headers,
               row['labels'] or {}, secret]
    if version == MAC_VERSION:
        covered = [MAC_VERSION] + covered + [bool(row['active'])]
    return hmac.new(key, json.dumps(covered, sort_keys=True, separators=(',', ':'),
                                    ensure_ascii=True).encode(), hashlib.sha256).hexdigest()


def _mac(config: Config, row: Mapping[str, Any], secret: str,
         headers: Mapping[str, str]) -> str:
    current, keys = _mac_keys(config)
    return '%s:%s:%s' % (MAC_VERSION, current, _digest(keys[current], row, secret, headers))


def _verifies(config: Config, row: Mapping[str, Any], secret: str,
              headers: Mapping[str, str]) -> bool:
    parts = str(row['mac'] or '').split(':')
    if len(parts) == 3 and parts[0] == MAC_VERSION:
        version, kid, digest = parts
    elif len(parts) == 2:           # version 1: a row made before ``active`` was covered
        version, (kid, digest) = '', parts
    else:
        return False
    key = _mac_keys(config)[1].get(kid)
    return key is not None and hmac.compare_digest(digest, _digest(key, row, secret, headers,
                                                                   version))


def _sealed(app: 'App', secret: str, headers: dict[str, str]) -> tuple[str, Any]:
    seal = app.store.sealer
    if not seal.sealing:
        return secret, headers
    data = json.dumps(headers, separators=(',', ':')).encode()
    return (SEALED_PREFIX + seal.seal_bytes('webhook_secret', secret.encode()),
            {SEALED_KEY: seal.seal_bytes('webhook_headers', data)})


def _opened(app: 'App', stored_secret: str,
            stored_headers: Any) -> tuple[Optional[str], Optional[dict]]:
    """The secret and headers, or None for one sealed under a key this process lacks."""
    seal = app.store.sealer
    secret: Optional[str] = stored_secret
    if stored_secret.startswith(SEALED_PREFIX):
        data = seal.open_bytes('webhook_secret', stored_secret[len(SEALED_PREFIX):])
        secret = data.decode() if data is not None else None
    headers: Optional[dict] = stored_headers or {}
    if isinstance(stored_headers, dict) and set(stored_headers) == {SEALED_KEY}:
        opened = seal.open_bytes('webhook_headers', str(stored_headers[SEALED_KEY]))
        headers = json.loads(opened) if opened is not None else None
    return secret, headers


def _webhook(app: 'App', row: Mapping[str, Any]) -> Webhook:
    secret, headers = _opened(app, row['secret'], row['headers'])
    verified = secret is not None and headers is not None and _verifies(app.config, row, secret,
                                                                        headers)
    return Webhook(row['id'], row['topic'], row['url'], row['method'], dict(headers or {}),
                   dict(row['labels'] or {}), bool(row['active']), row['created_at'],
                   row['updated_at'], secret or '', verified)


def add(topic: str, url: str, method: str = 'POST', headers: Optional[Mapping[str, str]] = None,
        labels: Optional[Mapping[str, str]] = None, clock: Clock = SYSTEM_CLOCK,
        app: Optional['App'] = None) -> Webhook:
    """Add an active webhook to ``app``'s records (by default the default
    app's); returned with its new secret (shown only now). WebhookError for
    a bad topic, URL, method, header or label, or a URL whose host is an IP
    address deliveries may not reach."""
    app = app or default_app()
    config = app.config
    guard.check_literal(url, config.WEBHOOK_ALLOWED_HOSTS)
    now = clock.time()
    row: dict[str, Any] = {
        'id': ID_PREFIX + random_id()[:24], 'topic': check_topic(topic), 'url': url,
        'method': check_method(method), 'labels': check_labels(labels) or None, 'active': 1,
        'created_at': now, 'updated_at': now}
    clear_headers = check_headers(headers)
    secret = signing.new_secret()
    row['mac'] = _mac(config, row, secret, clear_headers)
    row['secret'], row['headers'] = _sealed(app, secret, clear_headers)
    _store(app).add(row)
    return _webhook(app, row)


def list_webhooks(topic: Optional[str] = None, active_only: bool = False,
                  app: Optional['App'] = None) -> list[Webhook]:
    """Every webhook (of ``topic``; only the active ones), oldest first."""
    app = app or default_app()
    return [_webhook(app, row) for row in _store(app).rows(topic, active_only)]


def find(webhook_id: str, app: Optional['App'] = None) -> Optional[Webhook]:
    """The webhook, or None when there is none (any more)."""
    app = app or default_app()
    row = _store(app).row(webhook_id)
    return _webhook(app, row) if row is not None else None


def _not_found(webhook_id: str) -> WebhookNotFoundError:
    return WebhookNotFoundError('no webhook %s' % str(webhook_id)[:100])


def get(webhook_id: str, app: Optional['App'] = None) -> Webhook:
    """The webhook; WebhookNotFoundError when there is none."""
    found = find(webhook_id, app)
    if found is None:
        raise _not_found(webhook_id)
    return found


def set_active(webhook_id: str, active: bool, clock: Clock = SYSTEM_CLOCK,
               app: Optional['App'] = None) -> Webhook:
    """Enable or disable the webhook (a disabled one receives nothing, and
    its deliveries already queued are skipped); the webhook as it is now.
    Its MAC is made again (it covers ``active``): a webhook whose row does
    not verify cannot be changed, only removed."""
    app = app or default_app()
    hook = get(webhook_id, app)
    if not hook.verified:
        raise WebhookError('webhook %s cannot be changed: its row is not signed by this '
                           "deployment's MESSAGE_SIGNING_KEY (remove it and add it again)"
                           % hook.id)
    row = dict(dataclasses.asdict(hook), active=active)     # what the MAC covers, and more
    changed = _store(app).set_active(
        webhook_id, active, _mac(app.config, row, hook.secret, hook.headers), clock.time())
    if not changed:
        raise _not_found(webhook_id)
    return get(webhook_id, app)


def remove(webhook_id: str, app: Optional['App'] = None) -> None:
    """Delete the webhook; its deliveries already queued are skipped."""
    if not _store(app or default_app()).remove(webhook_id):
        raise _not_found(webhook_id)
