"""A webhook receiver for tests: a threaded HTTP server on 127.0.0.1 that
keeps every request and answers each path from a script of replies, and a
signature check written from the Standard Webhooks specification alone."""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional


@dataclasses.dataclass
class Reply:
    status: int = 200
    body: bytes = b'ok'
    headers: dict = dataclasses.field(default_factory=dict)
    #: Seconds to wait before answering (a receiver too slow for the timeout).
    delay_sec: float = 0.0


@dataclasses.dataclass
class Request:
    method: str
    path: str
    headers: dict          # names in lower case
    body: bytes


def verify(secret: str, headers: dict, body: bytes, now: Optional[int] = None,
           tolerance_sec: int = 300) -> bool:
    """Whether the request is signed with ``secret``, as the specification
    says: the secret is ``whsec_`` + base64 of the key; the signed content is
    ``{webhook-id}.{webhook-timestamp}.{body}``; ``webhook-signature`` lists
    ``v1,<base64 HMAC-SHA256>`` entries separated by spaces; the timestamp
    must be within the tolerance of now."""
    assert secret.startswith('whsec_')
    key = base64.b64decode(secret[len('whsec_'):])
    message_id, timestamp = headers['webhook-id'], headers['webhook-timestamp']
    content = message_id.encode() + b'.' + timestamp.encode() + b'.' + body
    expected = base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()
    if abs((now if now is not None else int(time.time())) - int(timestamp)) > tolerance_sec:
        return False
    for entry in headers['webhook-signature'].split(' '):
        version, _, signature = entry.partition(',')
        if version == 'v1' and hmac.compare_digest(signature, expected):
            return True
    return False


class Receiver:
    """``answer(path, Reply(...), ...)`` scripts a path's next replies (200
    'ok' once they run out); ``requests`` holds what came, in order."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.script: dict[str, list[Reply]] = {}
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.1'

            def _serve(self) -> None:
                length = int(self.headers.get('content-length') or 0)
                body = self.rfile.read(length) if length else b''
                with receiver._lock:
                    receiver.requests.append(Request(
                        self.command, self.path,
                        {name.lower(): value for name, value in self.headers.items()}, body))
                    replies = receiver.script.get(self.path.split('?')[0]) or []
                    reply = replies.pop(0) if replies else Reply()
                if reply.delay_sec:
                    time.sleep(reply.delay_sec)
                try:
                    self.send_response(reply.status)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.send_header('Content-Length', str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                except OSError:
                    pass                    # the client gave up (a timeout)

            do_POST = do_PUT = do_GET = _serve

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.02,),
                                        daemon=True)
        self._thread.start()

    def url(self, path: str = '/hook', host: str = '127.0.0.1') -> str:
        return 'http://%s:%d%s' % (host, self.port, path)

    def answer(self, path: str, *replies: Reply) -> None:
        with self._lock:
            self.script.setdefault(path, []).extend(replies)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
