"""Sending one delivery over HTTP with httpx: an app's client connects only
where :mod:`kale.webhooks.guard` allows and follows redirects itself
(docs/explanation/internals-records.md, "A delivery")."""
from __future__ import annotations

import dataclasses
import threading
import typing
import weakref
from typing import TYPE_CHECKING, Mapping, Optional, Sequence
from urllib.parse import urljoin

import httpcore
import httpx

from kale.clock import SYSTEM_CLOCK, Clock
from kale.exceptions import (
    WebhookAddressRefused,
    WebhookDeliveryError,
    WebhookError,
    WebhookRejectedError,
)
from kale.version import __version__
from kale.webhooks import guard, signing

if TYPE_CHECKING:
    from kale.app import App

MAX_REDIRECTS = 5
REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: How much of an answer's body is read, kept in the record and shown.
EXCERPT_BYTES = 1024
USER_AGENT = 'kale-webhooks/%s' % __version__


class GuardedBackend(httpcore.SyncBackend):
    """httpcore's network backend, connecting only to the addresses
    :func:`kale.webhooks.guard.checked_addresses` allows, the host's name
    kept for TLS (SNI and certificate checks), under the app's
    ``WEBHOOK_ALLOWED_HOSTS``."""

    def __init__(self, allowed_hosts: Sequence[str]):
        super().__init__()
        self.allowed_hosts = tuple(allowed_hosts)

    def connect_tcp(self, host: str, port: int, timeout: Optional[float] = None,
                    local_address: Optional[str] = None,
                    socket_options: Optional[typing.Iterable[typing.Any]] = None
                    ) -> httpcore.NetworkStream:
        try:
            addresses = guard.checked_addresses(host, port, self.allowed_hosts)
        except OSError as exc:
            raise httpcore.ConnectError('%s does not resolve: %s' % (host, exc)) from exc
        failure: Optional[Exception] = None
        for address in addresses:
            try:
                return super().connect_tcp(address, port, timeout, local_address,
                                           socket_options)
            except httpcore.ConnectError as exc:
                failure = exc
        assert failure is not None
        raise failure


def make_client(allowed_hosts: Sequence[str] = ()) -> httpx.Client:
    """A client whose connections reach only public addresses and
    ``allowed_hosts`` (the private hosts deliveries may reach)."""
    transport = httpx.HTTPTransport(trust_env=False)
    # httpx takes no network backend: its pool is replaced by one with ours.
    transport._pool = httpcore.ConnectionPool(
        ssl_context=httpx.create_ssl_context(trust_env=False),
        max_connections=100, max_keepalive_connections=20, keepalive_expiry=5.0,
        network_backend=GuardedBackend(tuple(allowed_hosts)))
    return httpx.Client(transport=transport, follow_redirects=False, trust_env=False,
                        headers={'user-agent': USER_AGENT})


class Sender:
    """An app's sender: its client (made on first use), under its
    WEBHOOK_ALLOWED_HOSTS, signing on its clock."""

    def __init__(self, allowed_hosts: Sequence[str] = (), clock: Clock = SYSTEM_CLOCK):
        self.allowed_hosts = tuple(allowed_hosts)
        self.clock = clock
        self._client: Optional[httpx.Client] = None
        self._lock = threading.Lock()
        _live.add(self)

    @property
    def client(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = make_client(self.allowed_hosts)
            return self._client

    def send(self, method: str, url: str, own_headers: Mapping[str, str], message_id: str,
             secret: str, body: bytes, timeout_sec: float) -> 'Answer':
        """Send the signed request, following redirects, signed at its
        clock's time; the answer. Raises WebhookDeliveryError for a timeout
        or a connection error (retriable) and WebhookRejectedError for an
        address refused, a bad redirect or too many."""
        clock = self.clock
        started = clock.monotonic()
        deadline = started + timeout_sec
        first = guard.parse_url(url)
        for hop in range(MAX_REDIRECTS + 1):
            target = _hop_target(url, hop)
            # The webhook's own headers go only to its URL's origin.
            headers = _signed_headers(own_headers if target == first else {}, message_id,
                                      secret, body, clock)
            response, excerpt = _request(self.client, method, url, body, headers, hop, started,
                                         deadline, clock)
            location = response.headers.get('location')
            if response.status_code in REDIRECTS and location:
                url = urljoin(url, location)
                continue
            return Answer(response.status_code, _ms(clock.monotonic() - started), excerpt,
                          response.headers.get('retry-after'))
        raise WebhookRejectedError('more than %d redirects, the last to %s' % (MAX_REDIRECTS,
                                                                              url[:200]))

    def close(self) -> None:
        """Close its client and its connections (a later send makes another)."""
        with self._lock:
            held, self._client = self._client, None
        if held is not None:
            held.close()


def sender_of(app: 'App') -> Sender:
    """``app``'s sender (one per app, and per process after a fork)."""
    return app.part('webhook-sender', lambda: Sender(app.config.WEBHOOK_ALLOWED_HOSTS,
                                                     app.clock))


#: Every sender of this process, for :func:`close` (not a cache: each app holds its own).
_live: 'weakref.WeakSet[Sender]' = weakref.WeakSet()


def close(app: Optional['App'] = None) -> None:
    """Close ``app``'s sender's connections; without an app, every sender's."""
    for sender in ([sender_of(app)] if app is not None else list(_live)):
        sender.close()


@dataclasses.dataclass(frozen=True)
class Answer:
    """What the (last) URL answered."""

    status: int
    latency_ms: int
    #: The first EXCERPT_BYTES of the body, as text.
    excerpt: str
    retry_after: Optional[str] = None

    def describe(self) -> str:
        text = ' '.join(self.excerpt.split())
        return 'HTTP %d in %d ms%s' % (self.status, self.latency_ms,
                                       ': %s' % text if text else '')


def _read_excerpt(response: httpx.Response) -> str:
    data = b''
    for chunk in response.iter_bytes():
        data += chunk
        if len(data) >= EXCERPT_BYTES:
            break
    return data[:EXCERPT_BYTES].decode('utf-8', 'replace')


def _hop_target(url: str, hop: int) -> guard.Target:
    """Where hop ``hop`` goes (0: the webhook's URL); WebhookRejectedError for a bad URL."""
    try:
        return guard.parse_url(url)
    except WebhookError as exc:
        raise WebhookRejectedError('%s%s' % ('redirect refused: ' if hop else '', exc)
                                   ) from None


def _signed_headers(own_headers: Mapping[str, str], message_id: str, secret: str, body: bytes,
                    clock: Clock) -> dict[str, str]:
    """``own_headers`` with the content type and the signature headers, signed now."""
    timestamp = int(clock.time())
    return {**own_headers, 'content-type': 'application/json', 'webhook-id': message_id,
            'webhook-timestamp': str(timestamp),
            'webhook-signature': signing.sign(secret, message_id, timestamp, body)}


def _request(http: httpx.Client, method: str, url: str, body: bytes, headers: Mapping[str, str],
             hop: int, started: float, deadline: float, clock: Clock
             ) -> tuple[httpx.Response, str]:
    """One request and its answer's excerpt, in the time left; its failures as webhook errors."""
    left = deadline - clock.monotonic()
    try:
        if left <= 0:
            raise httpx.TimeoutException('no time left for the redirect')
        with http.stream(method, url, content=body, headers=headers,
                         timeout=left) as response:
            return response, _read_excerpt(response)
    except WebhookAddressRefused as exc:
        raise WebhookRejectedError('%s%s' % (
            'redirect to %s refused: ' % url[:200] if hop else '', exc)) from None
    except httpx.TimeoutException as exc:
        raise WebhookDeliveryError('timed out after %d ms (%s)' % (
            _ms(clock.monotonic() - started), type(exc).__name__)) from None
    except httpx.TransportError as exc:
        raise WebhookDeliveryError('no answer after %d ms: %s: %s' % (
            _ms(clock.monotonic() - started), type(exc).__name__,
            str(exc).splitlines()[0][:300] if str(exc) else '')) from None


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))
