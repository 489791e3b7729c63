"""``kale web``: the task records' REST API and a live dashboard.

:func:`create_app` makes the ASGI application (Starlette), to serve with
``kale web`` (uvicorn) or to mount inside your own ASGI application;
:func:`kale.web.server.serve` is what ``kale web`` runs. Needs
``pip install "kale-sqs[web]"``.
"""
from __future__ import annotations

from kale.exceptions import ImproperlyConfigured

try:
    from kale.web.app import create_app
except ImportError as exc:  # pragma: no cover - depends on the extras installed
    raise ImproperlyConfigured('kale web needs Starlette and uvicorn: pip install '
                               '"kale-sqs[web]" (%s)' % exc) from exc

__all__ = ['create_app']
