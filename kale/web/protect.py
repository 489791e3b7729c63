"""What keeps ``kale web`` safe to open in a browser: cross-site requests,
DNS rebinding, stored script and tokens in URLs are refused or defused
(docs/explanation/internals-records.md, "Safe to open in a browser")."""
from __future__ import annotations

from typing import Iterable, Optional
from urllib.parse import parse_qsl, urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The header the dashboard (and any script of the operator's) sends with a
#: request that changes state.
REQUEST_HEADER = 'x-kale-request'

#: Methods that only read.
SAFE_METHODS = frozenset({'GET', 'HEAD', 'OPTIONS'})

#: Names that always mean this machine.
LOOPBACK_HOSTS = ('localhost', '127.0.0.1', '::1')

#: Query parameters that would carry a credential in a URL.
CREDENTIAL_PARAMETERS = frozenset({'token', 'access_token', 'bearer', 'auth', 'authorization'})

CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; "
                           "img-src 'self' data:; connect-src 'self'; base-uri 'none'; "
                           "form-action 'none'; frame-ancestors 'none'")

SECURITY_HEADERS = [
    (b'content-security-policy', CONTENT_SECURITY_POLICY.encode()),
    (b'x-content-type-options', b'nosniff'),
    (b'x-frame-options', b'DENY'),
    (b'referrer-policy', b'no-referrer'),
    (b'cross-origin-resource-policy', b'same-origin'),
]
#: Sent only where a browser applies it: over HTTPS, or to a loopback name.
#: Elsewhere (plain HTTP to a host name or address) Chromium ignores it and
#: writes an error to the console on every page load.
OPENER_POLICY = (b'cross-origin-opener-policy', b'same-origin')


def trustworthy(scope: Scope) -> bool:
    """Whether the browser deems the request's origin potentially
    trustworthy: HTTPS (as the request or a proxy's X-Forwarded-Proto says),
    or a loopback host."""
    headers = Headers(scope=scope)
    return scope.get('scheme') == 'https' or headers.get('x-forwarded-proto') == 'https' \
        or host_name(headers.get('host', '')) in LOOPBACK_HOSTS


def host_name(value: str) -> str:
    """The host of a ``Host`` header or an origin's netloc, without port or brackets."""
    value = value.strip().lower()
    if value.startswith('['):
        return value[1:value.find(']')] if ']' in value else value[1:]
    if value.count(':') == 1:
        return value.split(':', 1)[0]
    return value


#: The port a scheme means when none is given.
DEFAULT_PORTS = {'http': 80, 'https': 443}


def _port(scheme: str, netloc: str) -> int:
    """The port of an origin's netloc or a ``Host`` header (the scheme's own when none)."""
    try:
        port = urlsplit('//' + netloc).port
    except ValueError:
        return -1
    return port if port is not None else DEFAULT_PORTS.get(scheme, -1)


def same_origin(origin: str, scheme: str, host_header: str) -> bool:
    """Whether ``origin`` is this server's: the same scheme, host and port
    as the request it came with."""
    if origin == 'null':
        return False
    parts = urlsplit(origin.strip().lower())
    scheme = scheme.lower()
    return (parts.scheme == scheme and host_name(parts.netloc) == host_name(host_header)
            and _port(scheme, parts.netloc) == _port(scheme, host_header.strip().lower()))


class BrowserSafety:
    """ASGI middleware: the checks and headers that keep the API safe in a browser.
    ``allowed_hosts`` are the host names answered (``*`` answers any)."""

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str]):
        self.app = app
        self.allowed_hosts = {host_name(host) for host in allowed_hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope['type'] != 'http':
            await self.app(scope, receive, send)
            return
        problem = self.refusal(scope)
        if problem is not None:
            status, message = problem
            await JSONResponse({'error': message}, status_code=status,
                               headers={name.decode(): value.decode()
                                        for name, value in SECURITY_HEADERS})(scope, receive, send)
            return

        headers = SECURITY_HEADERS + [OPENER_POLICY] if trustworthy(scope) else SECURITY_HEADERS

        async def send_with_headers(message: Message) -> None:
            if message['type'] == 'http.response.start':
                message['headers'] = list(message.get('headers', [])) + headers
            await send(message)
        await self.app(scope, receive, send_with_headers)

    def refusal(self, scope: Scope) -> Optional[tuple[int, str]]:
        """(status, one-line reason) for a request refused, or None."""
        headers = Headers(scope=scope)
        host = host_name(headers.get('host', ''))
        if '*' not in self.allowed_hosts and host not in self.allowed_hosts:
            return 421, ('kale web does not answer for host %r: add it to WEB_ALLOWED_HOSTS '
                         'if it is yours' % host[:100])
        query = scope.get('query_string', b'').decode('latin-1')
        if any(name.lower() in CREDENTIAL_PARAMETERS for name, _ in parse_qsl(query)):
            return 400, ('a token is never accepted in the URL: send it in the Authorization '
                         'header')
        if scope['method'] in SAFE_METHODS:
            return None
        site = headers.get('sec-fetch-site', '')
        if site in ('cross-site', 'same-site'):
            return 403, 'kale web refuses a request another site made (Sec-Fetch-Site: %s)' % site
        origin = headers.get('origin')
        if origin is not None and not same_origin(origin, scope.get('scheme', 'http'),
                                                  headers.get('host', '')):
            return 403, 'kale web refuses a request from another origin (%s)' % origin[:100]
        if headers.get(REQUEST_HEADER) != '1':
            return 403, ('a request that changes state needs the header X-Kale-Request: 1 '
                         '(browsers cannot send it from another site)')
        return None
