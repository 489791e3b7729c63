"""Serving ``/metrics``: from one worker, or from the supervisor for all of its
workers (prometheus_client's multiprocess mode). See docs/explanation/internals-cli.md.
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from typing import Any, Optional

from prometheus_client import CollectorRegistry, multiprocess, start_http_server

from kale.exceptions import ImproperlyConfigured

logger = logging.getLogger(__name__)

#: Set in a supervised worker's environment: record metrics, do not serve them.
MULTIPROCESS_VARIABLE = 'KALE_METRICS_MULTIPROCESS'
#: prometheus_client's own variable: the directory its multiprocess mode writes to.
DIRECTORY_VARIABLE = 'PROMETHEUS_MULTIPROC_DIR'


def supervised() -> bool:
    """Whether this process is a worker whose supervisor serves its metrics."""
    return os.environ.get(MULTIPROCESS_VARIABLE) == '1' and bool(os.environ.get(DIRECTORY_VARIABLE))


class Server:
    """``/metrics`` for one registry, on a thread of its own."""

    def __init__(self, registry: Any, port: int, host: str, who: str):
        try:
            self.httpd, self.thread = start_http_server(port, host, registry)
        except OSError as exc:
            raise ImproperlyConfigured('METRICS_PORT %d: cannot serve metrics on %s:%d: %s'
                                       % (port, host, port, exc)) from None
        self.port = self.httpd.server_address[1]
        logger.info('%s: serving metrics at http://%s:%d/metrics', who, host, self.port)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


class SupervisorEndpoint:
    """The supervisor's ``/metrics``: its workers' multiprocess directory, summed."""

    def __init__(self, port: int, host: str):
        self.port = port
        self.host = host
        self.path: Optional[str] = None
        self.server: Optional[Server] = None
        self._lock = threading.Lock()

    def start(self, env: dict[str, str]) -> None:
        """Make the directory, put it in ``env`` (the workers' environment), serve."""
        self.path = tempfile.mkdtemp(prefix='kale-metrics-')
        env[DIRECTORY_VARIABLE] = self.path
        env[MULTIPROCESS_VARIABLE] = '1'
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=self.path)
        try:
            self.server = Server(registry, self.port, self.host, 'supervisor')
        except ImproperlyConfigured:
            self._remove()
            raise

    def worker_exited(self, pid: int) -> None:
        if self.path is not None:
            multiprocess.mark_process_dead(pid, self.path)

    def stop(self) -> None:
        with self._lock:
            if self.server is not None:
                self.server.stop()
                self.server = None
            self._remove()

    def _remove(self) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = None
