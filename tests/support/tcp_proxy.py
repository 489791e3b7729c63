"""A small TCP proxy that can be stopped and started, to simulate endpoint outages.

While stopped, connections to its port are refused and open ones are cut;
the server behind it keeps its state, and the port stays reserved so that no
other process (tests run in parallel) takes it before the proxy starts again.
Used by the end-to-end tests and the chaos benchmark.
"""
from __future__ import annotations

import socket
import threading
from typing import Callable, Optional


class TCPProxy:
    """Forwards 127.0.0.1:<port> to ``upstream`` while started."""

    def __init__(self, upstream_host: str, upstream_port: int, port: int = 0,
                 host: str = '127.0.0.1', on_request: Optional[Callable[[bytes], None]] = None):
        self.upstream = (upstream_host, upstream_port)
        self.host = host
        self.port = port
        #: Called with every chunk a client sends upstream (tests watch requests with it).
        self.on_request = on_request
        self._listener: Optional[socket.socket] = None
        self._placeholder: Optional[socket.socket] = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._running = threading.Event()

    @property
    def url(self) -> str:
        return 'http://%s:%d' % (self.host, self.port)

    def start(self) -> 'TCPProxy':
        listener = self._bound_socket()
        listener.listen(128)
        listener.settimeout(0.1)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._release_placeholder()
        self._running.set()
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def stop(self) -> None:
        """Refuse new connections and cut the open ones."""
        self._running.clear()
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.shutdown(socket.SHUT_RDWR)      # stop listening now, not at the next tick
            except OSError:
                pass
            listener.close()
        with self._lock:
            sockets, self._open = self._open, set()
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        if listener is not None:
            self._reserve_port()

    def close(self) -> None:
        """Stop for good and free the port."""
        self.stop()
        self._release_placeholder()

    def _bound_socket(self) -> socket.socket:
        """A socket bound to the proxy's address; binding again while a bound,
        non-listening socket holds the port needs SO_REUSEADDR on both."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        return sock

    def _reserve_port(self) -> None:
        """Hold the port with a bound socket that does not listen: connections
        are refused, and the port is not handed to anyone else meanwhile."""
        try:
            self._placeholder = self._bound_socket()
        except OSError:
            self._placeholder = None      # taken already: start() will say so

    def _release_placeholder(self) -> None:
        if self._placeholder is not None:
            self._placeholder.close()
            self._placeholder = None

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
            for source, target, observe in ((client, upstream, self.on_request),
                                            (upstream, client, None)):
                threading.Thread(target=self._pump, args=(source, target, observe),
                                 daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket,
              observe: Optional[Callable[[bytes], None]]) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if observe is not None:
                    observe(data)
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
