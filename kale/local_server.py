"""The embedded SQS-compatible endpoint behind ``kale sqs-local``.

It runs moto's server (the ``local`` extra) on 127.0.0.1, by default on
ElasticMQ's port 9324 so the same settings serve both. Queues live in the
server's memory and are gone when it stops.
"""
from __future__ import annotations

import errno
import logging
import signal
import socket
import threading
from typing import Any, Callable, Optional

from kale.exceptions import ImproperlyConfigured, KaleError

DEFAULT_HOST = '127.0.0.1'
DEFAULT_PORT = 9324


class PortInUseError(KaleError):
    """The port asked for is already taken."""


def _check_port(host: str, port: int) -> None:
    if port == 0:
        return
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind((host, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise PortInUseError('port %d on %s is already in use; stop what holds it or pick '
                                 'another with --port' % (port, host)) from None
        raise KaleError('cannot listen on %s:%d: %s' % (host, port, exc.strerror)) from None
    finally:
        probe.close()


def _moto_server_class() -> Any:
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        raise ImproperlyConfigured(
            "the embedded endpoint needs moto's server, which is not installed (%s): "
            "pip install 'kale[local]'" % exc) from None
    return ThreadedMotoServer


class LocalSQS:
    """A moto server in a background thread: ``start()``, ``url``, ``stop()``."""

    def __init__(self, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, verbose: bool = False):
        self.host = host
        self.port = port
        self.verbose = verbose
        self._server: Any = None

    def start(self) -> str:
        server_class = _moto_server_class()
        _check_port(self.host, self.port)
        if not self.verbose:
            logging.getLogger('werkzeug').setLevel(logging.ERROR)
        self._server = server_class(ip_address=self.host, port=self.port, verbose=False)
        self._server.start()
        self.port = self._server.get_host_and_port()[1]
        return self.url

    @property
    def url(self) -> str:
        return 'http://%s:%d' % (self.host, self.port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None


def serve(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, verbose: bool = False,
          announce: Callable[[str], None] = print) -> None:
    """Run the endpoint until SIGTERM or SIGINT (Ctrl-C), then stop it cleanly."""
    stop = threading.Event()

    def on_signal(signum: int, frame: Optional[Any]) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    server = LocalSQS(host, port, verbose)
    try:
        url = server.start()
        announce('kale sqs-local: SQS endpoint at %s (queues live in memory; Ctrl-C stops it)' % url)
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    announce('kale sqs-local: stopped')
