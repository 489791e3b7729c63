"""How a workflow keeps its nodes' calls and results at rest: serialized,
MACed, sealed, in the database or S3 (the format and why: docs/explanation/internals-workflow.md,
"Values at rest")."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import pickle
from typing import TYPE_CHECKING, Any, Callable, Optional

from kale.codec.keys import signing_keys
from kale.codec.serialize import SERIALIZER_CODES, SERIALIZER_NAMES
from kale.config import Config
from kale.exceptions import InvalidFlowError, KaleError, WorkflowError
from kale.transport.payloads import KEY_PREFIX
from kale.workflow.graph import _SAME, Upstream, UpstreamList, _walk

if TYPE_CHECKING:
    from kale.app import App
    from kale.transport.payloads import PayloadStore

VERSION = 'kw1'
#: Where the bytes are: in the database, or in an S3 object; and whether sealed.
IN_DATABASE, IN_S3 = 'd', 's'
SEALED, PLAIN = 'e', 'p'
#: How an upstream result stands in a call stored as JSON.
UPSTREAM, UPSTREAM_LIST = '__kale_upstream__', '__kale_upstream_list__'
#: The key prefix of results kept in S3.
S3_PREFIX = KEY_PREFIX + 'workflows/'
#: The columns a value is kept in (bound into its MAC and its seal).
CALL, RESULT = 'call', 'result'


def to_json(value: Any) -> Any:
    """``value`` with its upstream markers as one-key dicts (its tuples left for JSON to list)."""
    return _walk(value, lambda item: {UPSTREAM: item.task_id} if isinstance(item, Upstream) else
                 {UPSTREAM_LIST: [to_json(member) for member in item.items]}
                 if isinstance(item, UpstreamList) else _SAME)


def from_json(value: Any) -> Any:
    """A stored value with its markers back as :class:`Upstream`/:class:`UpstreamList`."""
    def replace(item: Any) -> Any:
        if isinstance(item, dict) and len(item) == 1 and UPSTREAM in item:
            return Upstream(item[UPSTREAM])
        if isinstance(item, dict) and len(item) == 1 and UPSTREAM_LIST in item:
            return UpstreamList(tuple(from_json(member) for member in item[UPSTREAM_LIST]))
        return _SAME
    return _walk(value, replace)


class Values:
    """Packs and unpacks workflow values under one configuration's keys."""

    def __init__(self, config: Config, sealer: Any, payloads: Callable[[], 'PayloadStore']):
        self.serializer = str(config.SERIALIZER)
        self.pickle_protocol = int(config.PICKLE_PROTOCOL)
        self.max_result_bytes = int(config.WORKFLOW_RESULT_MAX_BYTES)
        self.max_bytes = int(config.MAX_DECOMPRESSED_BYTES)
        self.bucket = str(config.PAYLOAD_BUCKET or '')
        self._payloads = payloads
        ring = signing_keys(config=config)
        self._mac_keys = {kid: hmac.new(key, b'kale-workflow-values', hashlib.sha256).digest()
                          for kid, key in ring.accepted.items()}
        self._mac_id = ring.current_id
        self._sealer = sealer

    def pack_call(self, task_id: str, task: str, queue: str, call: Any) -> str:
        """A node's call (``{'args': [...], 'kwargs': {...}}``) as stored text
        (InvalidFlowError when the serializer cannot hold it)."""
        if self.serializer == 'json':
            call = to_json(call)
        return self._pack(CALL, _bound(task_id, task, queue), call, 'the arguments of node %s'
                          % task_id, limit=0)

    def unpack_call(self, task_id: str, task: str, queue: str, text: Optional[str]) -> Any:
        code, call = self._unpack(CALL, _bound(task_id, task, queue), text)
        return from_json(call) if code == SERIALIZER_CODES['json'] else call

    def pack_result(self, task_id: str, result: Any) -> str:
        """A node's result as stored text; InvalidFlowError when the
        serializer cannot hold it, or it is too large for the database with
        no bucket to keep it in."""
        return self._pack(RESULT, task_id, result, 'the result of node %s' % task_id,
                          limit=self.max_result_bytes)

    def unpack_result(self, task_id: str, text: Optional[str]) -> Any:
        return self._unpack(RESULT, task_id, text)[1]

    def _pack(self, column: str, bound: str, value: Any, what: str, limit: int) -> str:
        raw = self._dumps(value, what)
        code = SERIALIZER_CODES[self.serializer]
        digest = _mac(self._mac_keys[self._mac_id], column, bound, code, raw)
        data, sealed = raw, PLAIN
        if self._sealer.sealing:
            data, sealed = self._sealer.seal_bytes('workflow-' + column, raw).encode(), SEALED
        where, body = IN_DATABASE, base64.b64encode(data).decode()
        if limit and len(raw) > limit:
            if not self.bucket:
                raise InvalidFlowError(
                    'result_too_large: %s is %d bytes serialized, over WORKFLOW_RESULT_MAX_BYTES '
                    'of %d (set PAYLOAD_BUCKET to keep larger results in S3)'
                    % (what, len(raw), limit))
            key = '%s%s/%s' % (S3_PREFIX, bound, digest[:16])
            try:
                self._payloads().put(self.bucket, key, data)
            except KaleError as exc:
                raise WorkflowError('%s could not be stored in S3: %s' % (what, exc)) from exc
            where, body = IN_S3, key
        return ':'.join((VERSION, code, self._mac_id, digest, where + sealed, body))

    def _unpack(self, column: str, bound: str, text: Optional[str]) -> tuple[str, Any]:
        """The serializer code and the value, its MAC checked before it is deserialized."""
        node = bound.split('\0')[0]
        _, code, kid, digest, place, body = _split(column, node, text)
        where, sealed = place[0], place[1]
        data = base64.b64decode(body.encode()) if where != IN_S3 else \
            self._from_s3(column, node, body)
        if sealed == SEALED:
            opened = self._sealer.open_bytes('workflow-' + column, data.decode('ascii', 'replace'))
            if opened is None:
                raise _refused(column, node, 'is sealed with a key this process does not have')
            data = opened
        key = self._mac_keys.get(kid)
        if key is None or not hmac.compare_digest(digest, _mac(key, column, bound, code, data)):
            raise _refused(column, node, 'is not signed by this deployment\'s MESSAGE_SIGNING_KEY '
                           '(written by something else, or changed)')
        if SERIALIZER_NAMES[code] == 'pickle':
            return code, pickle.loads(data)
        return code, json.loads(data.decode('utf-8'))

    def _from_s3(self, column: str, node: str, body: str) -> bytes:
        if not body.startswith(S3_PREFIX) or not self.bucket:
            raise _refused(column, node, 'points at S3, but PAYLOAD_BUCKET is not set')
        return self._payloads().get(self.bucket, body, self.max_bytes + 64)

    def _dumps(self, value: Any, what: str) -> bytes:
        try:
            if self.serializer == 'pickle':
                return pickle.dumps(value, protocol=self.pickle_protocol)
            return json.dumps(value, separators=(',', ':'), ensure_ascii=True,
                              allow_nan=False).encode('ascii')
        except (pickle.PicklingError, TypeError, ValueError, AttributeError,
                RecursionError) as exc:
            raise InvalidFlowError('workflow: %s cannot be serialized with %s: %s: %s' % (
                what, self.serializer, type(exc).__name__, exc)) from None


def _split(column: str, node: str, text: Optional[str]) -> list[str]:
    """A stored value's six fields; WorkflowError when it is not one this Kale stores."""
    parts = str(text).split(':', 5)
    if len(parts) != 6 or parts[0] != VERSION or parts[1] not in SERIALIZER_NAMES or \
            len(parts[4]) != 2:
        raise _refused(column, node, 'is not a value this Kale stored')
    return parts


def _refused(column: str, node: str, why: str) -> WorkflowError:
    return WorkflowError('workflow %s of node %s %s' % (column, node, why))


def _bound(task_id: str, task: str, queue: str) -> str:
    return '\0'.join((task_id, task, queue))


def _mac(key: bytes, column: str, bound: str, code: str, raw: bytes) -> str:
    covered = b'\0'.join((column.encode(), bound.encode(), code.encode(), raw))
    return hmac.new(key, covered, hashlib.sha256).hexdigest()


def values(app: 'App') -> Values:
    """``app``'s workflow values, made once."""
    return app.part('workflow-values', lambda: Values(app.config, app.store.sealer,
                                                      lambda: app.payloads))
