"""``kale web``: serve the API and the dashboard with uvicorn.

On a loopback address (127.0.0.1, ::1, localhost) no token is needed. On
any other, requests need a bearer token (``--token``, ``$KALE_WEB_TOKEN`` or
the ``WEB_TOKEN`` setting), and the server refuses to start without one.
"""
from __future__ import annotations

import ipaddress
import logging
import os
import socket
import sys
from typing import Callable, Optional

from kale.app import App, default_app
from kale.exceptions import ImproperlyConfigured, PortInUseError

logger = logging.getLogger(__name__)

TOKEN_VARIABLE = 'KALE_WEB_TOKEN'
MIN_TOKEN_CHARS = 16


def is_loopback(host: str) -> bool:
    if host == 'localhost':
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: str) -> None:
    """Refuse to listen beyond this machine without a token worth the name."""
    if is_loopback(host):
        return
    if not token:
        where = ('on every address of this machine, reachable from any network it is on'
                 if host in ('0.0.0.0', '::', '') else 'beyond this machine')
        raise ImproperlyConfigured(
            'kale web --host %s listens %s: set a bearer token in $%s (or the WEB_TOKEN '
            'setting), e.g. python -c "import secrets; print(secrets.token_hex(32))"'
            % (host or "''", where, TOKEN_VARIABLE))
    if len(token) < MIN_TOKEN_CHARS:
        raise ImproperlyConfigured('the kale web token must be at least %d characters'
                                   % MIN_TOKEN_CHARS)


def listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ':' in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise PortInUseError('kale web cannot listen on %s:%d: %s' % (host, port, exc.strerror)) \
            from exc
    sock.listen(128)
    return sock


def serve(host: str = '127.0.0.1', port: int = 8000, token: Optional[str] = None,
          announce: Callable[[str], None] = lambda line: print(line, flush=True),
          app: Optional[App] = None) -> int:
    """Serve ``app`` (default: the default app) until Ctrl-C or SIGTERM; returns 0."""
    import uvicorn

    from kale.web import create_app
    app = app or default_app()
    token = token or os.environ.get(TOKEN_VARIABLE, '') or app.config.WEB_TOKEN or ''
    check_exposure(host, token)
    if not app.config.RECORDS_URL:
        raise ImproperlyConfigured("kale web shows task records: set RECORDS_URL (e.g. "
                                   "'sqlite:///kale-records.db')")
    app.store.migrate()                 # the tables exist before the first request
    sock = listening_socket(host, port)
    bound, bound_port = sock.getsockname()[:2]
    url = 'http://%s:%d/' % ('[%s]' % bound if ':' in bound else bound, bound_port)
    announce('kale web: serving the dashboard at %s and the API at %sapi/ (Ctrl-C stops)%s'
             % (url, url, '; requests need the bearer token' if token else ''))
    # No access log: a request line may carry what a caller should not have
    # put in a URL; the token itself is refused there (kale.web.protect).
    from kale.web.app import allowed_hosts_for
    web = create_app(token=token or None, allowed_hosts=allowed_hosts_for(token, app, [host]),
                     app=app)
    config = uvicorn.Config(web, log_level='warning', access_log=False, lifespan='off')
    uvicorn.Server(config).run(sockets=[sock])
    sys.stdout.flush()
    return 0
