"""Where a webhook may send its requests: only public addresses, judged on
the addresses each connection is made to, and the hosts of
WEBHOOK_ALLOWED_HOSTS (docs/explanation/internals-records.md)."""
from __future__ import annotations

import ipaddress
import socket
from typing import Iterable, NamedTuple, Optional, Sequence, Union
from urllib.parse import SplitResult, urlsplit

from kale.exceptions import WebhookAddressRefused, WebhookError

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]

#: Addresses of cloud instance metadata services: AWS, GCP and Azure
#: (169.254.169.254), AWS over IPv6, ECS task metadata, Alibaba, Azure's
#: wire server (a public address, refused by name).
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(address) for address in (
    '169.254.169.254', 'fd00:ec2::254', '169.254.170.2', '100.100.100.200', '168.63.129.16'))
SHARED = ipaddress.ip_network('100.64.0.0/10')
NAT64 = ipaddress.ip_network('64:ff9b::/96')
SCHEMES = ('http', 'https')
MAX_URL_CHARS = 2048


class Target(NamedTuple):
    """What a URL connects to."""

    scheme: str
    host: str           # lower case, without brackets or a final dot
    port: int


def _check_text(url: str) -> None:
    """Refuse a URL that is not a string of 1 to MAX_URL_CHARS printable characters."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL_CHARS:
        raise WebhookError('a webhook URL must be a string of 1 to %d characters' % MAX_URL_CHARS)
    if any(ord(c) < 33 or ord(c) == 127 for c in url):
        raise WebhookError('a webhook URL may not hold spaces or control characters')


def _split(url: str) -> tuple[SplitResult, Optional[int]]:
    """The URL's parts and port; WebhookError unless http(s) with a host and no credentials."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise WebhookError('webhook URL %r does not parse: %s' % (url[:200], exc)) from None
    if parts.scheme.lower() not in SCHEMES or not parts.hostname:
        raise WebhookError('a webhook URL must be http:// or https:// with a host, got %r'
                           % url[:200])
    if parts.username is not None or parts.password is not None:
        raise WebhookError('a webhook URL may not carry credentials (user:password@): send '
                           'them in a header (--header)')
    return parts, port


def parse_url(url: str) -> Target:
    """The scheme, host and port of a webhook URL; WebhookError for anything
    but an absolute http or https URL without credentials."""
    _check_text(url)
    parts, port = _split(url)
    scheme = parts.scheme.lower()
    return Target(scheme, _host(str(parts.hostname)), port or (443 if scheme == 'https' else 80))


def _host(host: str) -> str:
    return host.strip('[]').lower().rstrip('.')


def _address(text: str) -> Optional[IPAddress]:
    try:
        return ipaddress.ip_address(text.split('%', 1)[0])
    except ValueError:
        return None


def _split_entry(entry: str) -> tuple[str, Optional[int]]:
    """An allowed-hosts entry as (host, port or None)."""
    entry = entry.strip()
    if entry.startswith('['):
        host, _, rest = entry[1:].partition(']')
        return _host(host), int(rest[1:]) if rest.startswith(':') and rest[1:].isdigit() else None
    if entry.count(':') == 1:
        host, _, port = entry.partition(':')
        if port.isdigit():
            return _host(host), int(port)
    return _host(entry), None


def _same_host(a: str, b: str) -> bool:
    if a == b:
        return True
    first, second = _address(a), _address(b)
    return first is not None and first == second


def host_allowed(host: str, port: int, allowed: Iterable[str]) -> bool:
    """Whether ``host`` (a name or an address) on ``port`` is one of the
    ``allowed`` entries (``host`` or ``host:port``)."""
    host = _host(host)
    for entry in allowed:
        name, only_port = _split_entry(entry)
        if _same_host(name, host) and only_port in (None, port):
            return True
    return False


def _inner_ipv4(ip: ipaddress.IPv6Address) -> Optional[ipaddress.IPv4Address]:
    """The IPv4 address inside an IPv6 one (Teredo, IPv4-mapped, 6to4 or NAT64), or None."""
    if ip.teredo:
        return ip.teredo[1]
    return ip.ipv4_mapped or ip.sixtofour or (
        ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF) if ip in NAT64 else None)


def _special_range(ip: IPAddress) -> Optional[str]:
    """The first special range ``ip`` lies in (e.g. 'a loopback address'), or None."""
    for what, found in (('an unspecified address', ip.is_unspecified),
                        ('a loopback address', ip.is_loopback),
                        ('a link-local address', ip.is_link_local),
                        ('a multicast address', ip.is_multicast),
                        ('a shared address (100.64.0.0/10)',
                         isinstance(ip, ipaddress.IPv4Address) and ip in SHARED),
                        ('a reserved address', ip.is_reserved),
                        ('a private address', ip.is_private),
                        ('not a public address', not ip.is_global)):
        if found:
            return what
    return None


def refusal(address: str) -> Optional[str]:
    """Why a delivery may not connect to ``address`` (e.g. 'a private
    address'), or None for a public one."""
    ip = _address(address)
    if ip is None:
        return 'not an IP address'
    if ip in METADATA_ADDRESSES:
        return 'a cloud metadata address'
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _inner_ipv4(ip)
        if inner is not None:
            return refusal(str(inner))
        if ip.is_site_local:
            return 'a site-local address'
    return _special_range(ip)


def resolve(host: str, port: int) -> list[str]:
    """The addresses of ``host`` (an address stands for itself), in
    ``socket.getaddrinfo``'s order; socket.gaierror when it has none."""
    if _address(host) is not None:
        return [host]
    found: list[str] = []
    for _family, _kind, _proto, _name, sockaddr in socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM):
        address = str(sockaddr[0])
        if address not in found:
            found.append(address)
    return found


def checked_addresses(host: str, port: int, allowed: Sequence[str]) -> list[str]:
    """The addresses a delivery to ``host:port`` may connect to: all of them
    when the host is allowed, else all of them if every one is public;
    WebhookAddressRefused otherwise, naming the host, the address and why.
    OSError when the name does not resolve."""
    addresses = resolve(host, port)
    if not addresses:
        raise socket.gaierror('%s has no address' % host)
    if host_allowed(host, port, allowed):
        return addresses
    for address in addresses:
        why = refusal(address)
        if why is not None:
            shown = host if host == address else '%s (%s)' % (host, address)
            raise WebhookAddressRefused(
                'webhook host %s is %s: webhooks reach only public addresses and the hosts of '
                'WEBHOOK_ALLOWED_HOSTS' % (shown, why))
    return addresses


def check_literal(url: str, allowed: Sequence[str]) -> Target:
    """:func:`parse_url`, and WebhookAddressRefused when the host is an IP
    address a delivery may not reach (names are judged when a delivery
    resolves them)."""
    target = parse_url(url)
    if _address(target.host) is not None:
        checked_addresses(target.host, target.port, allowed)
    return target
