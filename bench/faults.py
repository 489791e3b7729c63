"""An HTTP proxy in front of an SQS endpoint that fails requests the ways
real SQS does, seeded, on 127.0.0.1.

    proxy = FaultProxy('http://127.0.0.1:9324', seed=3).start()
    proxy.inject('throttle', seconds=4, probability=0.5)     # a burst
    ...                                                       # clients use proxy.url
    proxy.stop()

A fault is a burst: for ``seconds``, each request whose operation is among
``operations`` (default: any) meets it with ``probability``. Kinds:

``throttle``
    400 ``ThrottlingException`` or ``RequestThrottled``, not forwarded.
``server_error``
    500 ``InternalError`` or 503 ``ServiceUnavailable``, not forwarded.
``slow``
    forwarded after a pause of 2-5 s (longer than a short read timeout).
``lost_answer``
    forwarded and applied, then the connection is closed with no answer.
``cut_answer``
    forwarded and applied, then half the answer is sent and the connection
    closed.
``partial_batch``
    a ``SendMessageBatch``, ``DeleteMessageBatch`` or
    ``ChangeMessageVisibilityBatch`` has some of its entries removed before
    it is forwarded; the answer lists them under ``Failed`` (as SQS does when
    part of a batch fails), so what the answer says is what happened. On a
    FIFO queue a failed entry fails the later entries of its group too, so
    the group's order holds.
``wrong_shape``
    forwarded and applied, then its 200 answer is replaced by one of the
    wrong shape for its operation (the shapes of :data:`WRONG_SHAPES`, in
    turn): what a faulty or hostile endpoint might send.

:attr:`FaultProxy.latency_sec`, when set, delays every SQS request by as
much before it is forwarded, for the whole run (a slow or far endpoint,
not a fault).

Requests in the JSON protocol (``X-Amz-Target: AmazonSQS.Operation``) and in
the query protocol (``Action=Operation``) are understood; every other
request (S3) is forwarded untouched. :attr:`FaultProxy.met` counts the
faults met by kind and operation, :attr:`FaultProxy.applied_unanswered`
the requests that were applied but whose answer never arrived whole,
:attr:`FaultProxy.shapes` the wrong shapes sent by operation and shape.
"""
from __future__ import annotations

import collections
import dataclasses
import http.client
import http.server
import json
import random
import socket
import threading
import time
from typing import Iterable, Optional
from urllib.parse import parse_qs, urlparse

KINDS = ('throttle', 'server_error', 'slow', 'lost_answer', 'cut_answer', 'partial_batch',
         'wrong_shape')
BATCH_OPERATIONS = frozenset({'SendMessageBatch', 'DeleteMessageBatch',
                              'ChangeMessageVisibilityBatch'})
HOP_HEADERS = frozenset({'connection', 'keep-alive', 'transfer-encoding', 'proxy-connection'})


@dataclasses.dataclass
class Burst:
    kind: str
    until: float                       # monotonic
    probability: float
    operations: Optional[frozenset[str]]


class FaultProxy:
    """See the module docstring."""

    def __init__(self, upstream: str, seed: int = 0):
        parsed = urlparse(upstream)
        self.upstream = (parsed.hostname or '127.0.0.1', parsed.port or 80)
        self.rng = random.Random(seed)
        self._lock = threading.Lock()
        self.bursts: list[Burst] = []
        self.met: collections.Counter[tuple[str, str]] = collections.Counter()
        self.applied_unanswered: collections.Counter[str] = collections.Counter()
        self.requests: collections.Counter[str] = collections.Counter()
        self.shapes: collections.Counter[tuple[str, str]] = collections.Counter()
        #: Seconds every SQS request waits before it is forwarded.
        self.latency_sec = 0.0
        self.server: Optional[http.server.ThreadingHTTPServer] = None
        self.url = ''

    # --- control --------------------------------------------------------------------

    def start(self) -> 'FaultProxy':
        proxy = self

        class Handler(_Handler):
            owner = proxy

        class Server(http.server.ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                pass            # a client that went away (a read timeout) is no news
        self.server = Server(('127.0.0.1', 0), Handler)
        self.server.daemon_threads = True
        self.url = 'http://127.0.0.1:%d' % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, name='fault-proxy',
                         daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def inject(self, kind: str, seconds: float, probability: float = 0.5,
               operations: Optional[Iterable[str]] = None) -> None:
        """A burst of ``kind`` for ``seconds`` from now."""
        if kind not in KINDS:
            raise ValueError('unknown fault %r: use one of %s' % (kind, ', '.join(KINDS)))
        with self._lock:
            self.bursts.append(Burst(kind, time.monotonic() + seconds, probability,
                                     frozenset(operations) if operations else None))

    def calm(self) -> None:
        """End every burst now."""
        with self._lock:
            self.bursts.clear()

    def fault_for(self, operation: str) -> Optional[str]:
        """The fault this request meets, if any (drawn from the seeded generator)."""
        now = time.monotonic()
        with self._lock:
            self.requests[operation] += 1
            self.bursts = [b for b in self.bursts if b.until > now]
            for burst in self.bursts:
                if burst.operations is not None and operation not in burst.operations:
                    continue
                if burst.kind == 'partial_batch' and operation not in BATCH_OPERATIONS:
                    continue
                if self.rng.random() < burst.probability:
                    self.met[(burst.kind, operation)] += 1
                    return burst.kind
        return None

    def draw(self, low: float, high: float) -> float:
        with self._lock:
            return self.rng.uniform(low, high)

    def choose_failed(self, count: int) -> set[int]:
        """Which entries of a batch of ``count`` fail (at least one)."""
        with self._lock:
            failing = {i for i in range(count) if self.rng.random() < 0.4}
            return failing or {self.rng.randrange(count)}

    def wrong_shape(self, operation: str, answer: bytes) -> bytes:
        """The next wrong shape of ``operation``'s answer (in turn), made from ``answer``."""
        shapes = WRONG_SHAPES.get(operation, DEFAULT_SHAPES)
        with self._lock:
            turn = sum(self.shapes[(operation, name)] for name in shapes)
            name = list(shapes)[turn % len(shapes)]
            self.shapes[(operation, name)] += 1
        try:
            found = json.loads(answer or b'{}')
        except ValueError:
            found = {}
        return shapes[name](found if isinstance(found, dict) else {})

    def summary(self) -> dict[str, int]:
        """Faults met, by kind."""
        by_kind: collections.Counter[str] = collections.Counter()
        for (kind, _), count in self.met.items():
            by_kind[kind] += count
        return dict(by_kind)


class _Handler(http.server.BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = 'HTTP/1.1'

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.relay()

    def do_GET(self) -> None:
        self.relay()

    def do_PUT(self) -> None:
        self.relay()

    def do_DELETE(self) -> None:
        self.relay()

    def do_HEAD(self) -> None:
        self.relay()

    # --- one request ------------------------------------------------------------------

    def relay(self) -> None:
        length = int(self.headers.get('Content-Length') or 0)
        body = self.rfile.read(length) if length else b''
        json_protocol = 'AmazonSQS.' in self.headers.get('X-Amz-Target', '')
        operation = operation_of(self.headers.get('X-Amz-Target', ''), body)
        fault = self.owner.fault_for(operation) if operation else None
        if operation and self.owner.latency_sec:
            time.sleep(self.owner.latency_sec)
        if fault == 'throttle':
            code = 'ThrottlingException' if self.owner.draw(0, 1) < 0.5 else 'RequestThrottled'
            return self.error(400, code, 'Rate exceeded', json_protocol)
        if fault == 'server_error':
            if self.owner.draw(0, 1) < 0.5:
                return self.error(500, 'InternalError', 'injected', json_protocol)
            return self.error(503, 'ServiceUnavailable', 'injected', json_protocol)
        if fault == 'slow':
            time.sleep(self.owner.draw(2.0, 5.0))
        failed: list[dict[str, object]] = []
        if fault == 'partial_batch' and json_protocol:
            body, failed = self.drop_entries(body)
            if body is None:            # every entry failed: nothing to forward
                return self.answer(200, {'Content-Type': 'application/x-amz-json-1.0'},
                                   json.dumps({'Successful': [], 'Failed': failed}).encode())
        try:
            status, headers, answer = self.forward(body)
        except OSError:
            self.close_connection = True
            return self.error(503, 'ServiceUnavailable', 'upstream unreachable', json_protocol)
        if failed and status == 200:
            found = json.loads(answer or b'{}')
            found['Failed'] = list(found.get('Failed') or []) + failed
            found.setdefault('Successful', [])
            answer = json.dumps(found).encode()
        if fault == 'wrong_shape' and status == 200:
            answer = self.owner.wrong_shape(operation, answer)
        if fault == 'lost_answer':
            self.owner.applied_unanswered[operation] += 1
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return None
        if fault == 'cut_answer':
            self.owner.applied_unanswered[operation] += 1
            self.send_response(status)
            for name, value in headers:
                if name.lower() not in HOP_HEADERS and name.lower() != 'content-length':
                    self.send_header(name, value)
            self.send_header('Content-Length', str(len(answer)))
            self.end_headers()
            self.wfile.write(answer[:len(answer) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return None
        return self.answer(status, dict(headers), answer)

    def drop_entries(self, body: bytes) -> tuple[Optional[bytes], list[dict[str, object]]]:
        request = json.loads(body or b'{}')
        entries = list(request.get('Entries') or [])
        if not entries:
            return body, []
        failing = self.owner.choose_failed(len(entries))
        if str(request.get('QueueUrl', '')).endswith('.fifo'):
            # A FIFO queue keeps each group in order: an entry that fails
            # fails the group's later entries of the batch with it.
            stopped: set[str] = set()
            for index, entry in enumerate(entries):
                group = str(entry.get('MessageGroupId', ''))
                if index in failing or group in stopped:
                    failing.add(index)
                    stopped.add(group)
        failed = [{'Id': entry['Id'], 'SenderFault': False, 'Code': 'InternalError',
                   'Message': 'injected partial failure'}
                  for index, entry in enumerate(entries) if index in failing]
        kept = [entry for index, entry in enumerate(entries) if index not in failing]
        if not kept:
            return None, failed
        request['Entries'] = kept
        return json.dumps(request).encode(), failed

    def forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        connection = getattr(self, '_upstream', None)
        for attempt in (1, 2):
            if connection is None:
                connection = self._upstream = http.client.HTTPConnection(
                    *self.owner.upstream, timeout=60)
            try:
                headers = {name: value for name, value in self.headers.items()
                           if name.lower() not in HOP_HEADERS and name.lower() != 'content-length'}
                headers['Content-Length'] = str(len(body))
                connection.request(self.command, self.path, body=body, headers=headers)
                response = connection.getresponse()
                return response.status, response.getheaders(), response.read()
            except (http.client.HTTPException, OSError):
                connection.close()
                connection = self._upstream = None
                if attempt == 2:
                    raise
        raise OSError('unreachable')

    def error(self, status: int, code: str, message: str, json_protocol: bool) -> None:
        if json_protocol:
            body = json.dumps({'__type': 'com.amazonaws.sqs#%s' % code,
                               'message': message}).encode()
            headers = {'Content-Type': 'application/x-amz-json-1.0',
                       'x-amzn-query-error': '%s;Sender' % code}
        else:
            body = ('<ErrorResponse><Error><Type>Sender</Type><Code>%s</Code><Message>%s'
                    '</Message></Error><RequestId>x</RequestId></ErrorResponse>'
                    % (code, message)).encode()
            headers = {'Content-Type': 'text/xml'}
        self.answer(status, headers, body)

    def answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            if name.lower() not in HOP_HEADERS and name.lower() != 'content-length':
                self.send_header(name, value)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        if self.command != 'HEAD':
            self.wfile.write(body)


# --- answers of the wrong shape -------------------------------------------------------

#: Deeper than any parser's recursion limit.
DEEP = 100_000


def _deep(found: dict) -> bytes:
    return b'{"Messages": ' + b'[' * DEEP + b']' * DEEP + b'}'


def _messages(found: dict) -> list:
    """The answer's messages, or a made-up one where it has none."""
    return list(found.get('Messages') or [{'MessageId': 'made-up', 'ReceiptHandle': 'made-up',
                                           'Body': 'made-up'}])


def _messages_a_string(found: dict) -> bytes:
    return json.dumps({'Messages': json.dumps(_messages(found))}).encode()


def _no_message_id(found: dict) -> bytes:
    return json.dumps({'Messages': [{k: v for k, v in m.items() if k != 'MessageId'}
                                    for m in _messages(found)]}).encode()


def _count_not_a_number(found: dict) -> bytes:
    return json.dumps({'Messages': [dict(m, Attributes=dict(m.get('Attributes') or {},
                                                             ApproximateReceiveCount='many'))
                                    for m in _messages(found)]}).encode()


def _entry_ids(found: dict, make_id) -> bytes:
    """A batch answer whose entries' ids are ``make_id(id)`` (one made up where it names none)."""
    successful = list(found.get('Successful') or []) or [{'Id': '0', 'MessageId': 'made-up'}]
    return json.dumps({'Successful': [dict(e, Id=make_id(str(e.get('Id')))) for e in successful],
                       'Failed': found.get('Failed') or []}).encode()


#: The wrong shapes of each operation's answer, by name.
WRONG_SHAPES = {
    'ReceiveMessage': {'messages_a_string': _messages_a_string, 'no_message_id': _no_message_id,
                       'count_not_a_number': _count_not_a_number, 'deep_nesting': _deep},
    'SendMessage': {'message_id_a_number': lambda found: b'{"MessageId": 12345}',
                    'deep_nesting': _deep},
    'GetQueueAttributes': {'count_not_a_number': lambda found: json.dumps({'Attributes': {
        name: 'lots' for name in (found.get('Attributes') or {'ApproximateNumberOfMessages': 0})
    }}).encode(), 'attributes_a_list': lambda found: b'{"Attributes": []}'},
    'GetQueueUrl': {'url_an_object': lambda found: b'{"QueueUrl": {}}'},
    **{operation: {'id_not_a_number': lambda found: _entry_ids(found, lambda i: 'x' + i),
                   'id_out_of_range': lambda found: _entry_ids(found, lambda i: str(int(i) + 99)
                                                               if i.isdigit() else '99'),
                   'deep_nesting': _deep}
       for operation in BATCH_OPERATIONS},
}
DEFAULT_SHAPES = {'deep_nesting': _deep}


def operation_of(target: str, body: bytes) -> str:
    """The SQS operation a request asks for ('' for anything else)."""
    if target.startswith('AmazonSQS.'):
        return target[len('AmazonSQS.'):]
    if body[:200].find(b'Action=') >= 0:
        try:
            return parse_qs(body.decode('ascii', 'replace')).get('Action', [''])[0]
        except ValueError:
            return ''
    return ''
