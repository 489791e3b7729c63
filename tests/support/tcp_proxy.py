"""A small TCP proxy that can be stopped and started, to simulate endpoint outages.

While stopped, connections to its port are refused and open ones are cut;
the server behind it keeps its state. Used by the end-to-end tests and the
chaos benchmark.
"""
from __future__ import annotations

import socket
import threading
from typing import Optional


class TCPProxy:
    """Forwards 127.0.0.1:<port> to ``upstream`` while started."""

    def __init__(self, upstream_host: str, upstream_port: int, port: int = 0,
                 host: str = '127.0.0.1'):
        self.upstream = (upstream_host, upstream_port)
        self.host = host
        self.port = port
        self._listener: Optional[socket.socket] = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._running = threading.Event()

    @property
    def url(self) -> str:
        return 'http://%s:%d' % (self.host, self.port)

    def start(self) -> 'TCPProxy':
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self.port))
        listener.listen(128)
        listener.settimeout(0.1)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._running.set()
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def stop(self) -> None:
        """Refuse new connections and cut the open ones."""
        self._running.clear()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with self._lock:
            sockets, self._open = self._open, set()
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while self._running.is_set():
            try:
                client, _ = listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            client.settimeout(None)
            upstream.settimeout(None)
            with self._lock:
                self._open.update((client, upstream))
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            with self._lock:
                self._open.discard(source)
                self._open.discard(target)
            source.close()
