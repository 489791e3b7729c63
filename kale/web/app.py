"""The ``kale web`` ASGI application: the REST API and the dashboard
(:func:`create_app`; mount it with ``Mount('/kale', app=create_app())``).
Errors are one-line JSON answers with their status; with a token, ``/api``
and ``/metrics`` need it (docs/explanation/internals-records.md)."""
from __future__ import annotations

import hashlib
import hmac
import logging
import os
from typing import Any, Callable, Optional, Sequence

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from kale.app import App, default_app
from kale.broker import Broker
from kale.exceptions import (
    BadFilterError,
    KaleError,
    NotAllowedError,
    RecordConflictError,
    RecordNotFoundError,
    RecordsUnavailableError,
    SQSError,
    WorkflowConflictError,
    WorkflowError,
    WorkflowNotFoundError,
)
from kale.web import routes
from kale.web.openapi import ENDPOINTS, OPENAPI
from kale.web.protect import LOOPBACK_HOSTS, BrowserSafety

logger = logging.getLogger(__name__)

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'static')

#: Exception class -> HTTP status, most specific first.
STATUS_OF: list[tuple[type[Exception], int]] = [
    (BadFilterError, 400), (RecordNotFoundError, 404), (RecordConflictError, 409),
    (RecordsUnavailableError, 503), (SQSError, 502), (WorkflowNotFoundError, 404),
    (WorkflowConflictError, 409), (WorkflowError, 400), (NotAllowedError, 403), (KaleError, 400)]


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({'error': message.splitlines()[0] if message else 'error'},
                        status_code=status)


def failed(exc: KaleError) -> JSONResponse:
    """The answer to a request that raised ``exc``: its status, and its
    message as an API caller may read it (its ``public`` one, without the
    paths of the machine's files, when it has one). A fault of the server
    (5xx) is logged whole, for its operator."""
    status = next(code for kind, code in STATUS_OF if isinstance(exc, kind))
    if status >= 500 and exc.public is not None:
        logger.warning('kale web: %s', exc)
    return error(status, exc.public if exc.public is not None else str(exc))


#: The documents under /api that need no token (the API's description), by exact path.
OPEN_API_PATHS = frozenset({'/api/openapi.json'})


class BearerToken:
    """ASGI middleware: every ``/api`` route and ``/metrics`` need
    ``Authorization: Bearer TOKEN`` (Prometheus sends it with
    ``authorization: {credentials: ...}``), but the exact paths of
    :data:`OPEN_API_PATHS`."""

    def __init__(self, app: ASGIApp, token: str):
        self.app = app
        self.expected = ('Bearer ' + token).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        root = scope.get('root_path', '')
        path = scope['path'][len(root):] if scope['path'].startswith(root) else scope['path']
        if scope['type'] == 'http' and (path == '/metrics' or (
                (path == '/api' or path.startswith('/api/')) and path not in OPEN_API_PATHS)):
            given = dict(scope['headers']).get(b'authorization', b'')
            if not hmac.compare_digest(given, self.expected):
                response = error(401, 'a bearer token is required: send Authorization: Bearer '
                                      'TOKEN (KALE_WEB_TOKEN)')
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def answer(request: Request, data: Any) -> Response:
    """``data`` as JSON; a GET's answer carries an ETag of its body, and is a
    304 with no body when the request's If-None-Match names it (the
    dashboard's refresh asks so: an answer that did not change costs no
    transfer and no drawing)."""
    response = JSONResponse(data)
    if request.method != 'GET':
        return response
    etag = 'W/"%s"' % hashlib.blake2b(response.body, digest_size=12).hexdigest()
    headers = {'ETag': etag, 'Cache-Control': 'no-cache'}
    given = request.headers.get('if-none-match', '')
    if etag in (tag.strip() for tag in given.split(',')):
        return Response(status_code=304, headers=headers)
    response.headers.update(headers)
    return response


def _handled(endpoint: Callable[..., Any], reads_body: bool) -> Callable[[Request], Any]:
    """An endpoint on Starlette's thread pool (its body read on the event loop); Kale errors answer."""
    async def handle(request: Request) -> Response:
        args = (request, await request.body()) if reads_body else (request,)
        try:
            return await run_in_threadpool(lambda: answer(request, endpoint(*args)))
        except KaleError as exc:
            return failed(exc)
    handle.__name__ = endpoint.__name__
    return handle


def _metrics(api: routes.Api) -> Callable[[Request], Response]:
    """``/metrics`` in Prometheus' text format (or OpenMetrics, when asked)."""
    def metrics(request: Request) -> Response:
        try:
            body, content_type = api.metrics(request.headers.get('accept'))
        except ImportError as exc:
            if (exc.name or '').split('.')[0] != 'prometheus_client':
                raise
            return error(501, "/metrics needs prometheus_client: pip install 'kale-sqs[metrics]'")
        except KaleError as exc:
            return failed(exc)
        return Response(body, headers={'Content-Type': content_type})
    return metrics


def allowed_hosts_for(token: Optional[str], app: App, served: Sequence[str] = ()) -> list[str]:
    """The host names answered (see :mod:`kale.web.protect`): the loopback
    names, ``served`` and ``app``'s WEB_ALLOWED_HOSTS; with a token and no
    WEB_ALLOWED_HOSTS, any."""
    listed = list(app.config.WEB_ALLOWED_HOSTS or ())
    if token and not listed:
        return ['*']
    return [*LOOPBACK_HOSTS, *served, *listed]


def create_app(records_url: Optional[str] = None, token: Optional[str] = None,
               broker: Optional[Callable[[], Broker]] = None,
               allowed_hosts: Optional[Sequence[str]] = None,
               app: Optional[App] = None) -> Starlette:
    """The API and dashboard of ``app`` (default: the default app): its
    records (on ``records_url``, when given, instead of its RECORDS_URL), its
    queues (``broker`` makes the broker; default: its command broker), its
    workflows and schedules. With ``token``, ``/api`` needs it.
    ``allowed_hosts``: the ``Host`` names answered (default
    :func:`allowed_hosts_for`); a state-changing request needs
    ``X-Kale-Request: 1`` (see :mod:`kale.web.protect`)."""
    app = app or default_app()
    if records_url:
        app = app.replace(RECORDS_URL=records_url)
    api = routes.Api(app, broker, submit_allowed=bool(token) or bool(
        app.config.WEB_ALLOW_SUBMIT_WITHOUT_TOKEN))
    handlers = [
        *(Route(endpoint.path, _handled(getattr(api, endpoint.handler), endpoint.body is not None),
                methods=[endpoint.method]) for endpoint in ENDPOINTS),
        Route('/api/openapi.json', lambda request: JSONResponse(OPENAPI), methods=['GET']),
        Route('/metrics', _metrics(api), methods=['GET']),
        Route('/', lambda request: FileResponse(os.path.join(STATIC_DIR, 'index.html')),
              methods=['GET']),
        Mount('/static', app=StaticFiles(directory=STATIC_DIR), name='static'),
    ]
    hosts = allowed_hosts if allowed_hosts is not None else allowed_hosts_for(token, app)
    middleware = [Middleware(BrowserSafety, allowed_hosts=hosts)]
    if token:
        middleware.append(Middleware(BearerToken, token=token))

    async def not_found(request: Request, exc: Exception) -> Response:
        return error(404, 'no route %s %s' % (request.method, request.url.path))

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return error(405, 'method %s not allowed on %s' % (request.method, request.url.path))

    web = Starlette(routes=handlers, middleware=middleware,
                    exception_handlers={404: not_found, 405: not_allowed})
    web.state.api = api
    return web
