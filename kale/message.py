"""Task messages: the envelope, its serialization, compression and signature.

A body on the wire looks like ``kale1:<flags>:<signature>:<data>``:

- ``flags`` is two characters: the serializer (``p`` pickle, ``j`` JSON) and
  ``z`` when the data is zlib-compressed or ``-`` when it is not;
- ``data`` is the serialized payload, base64-encoded unless it is plain JSON;
- ``signature`` is base64url(HMAC-SHA256(key, "kale1:<flags>:<data>")), so it
  covers everything else in the body, flags included.

:func:`decode` checks the signature with a constant-time compare against the
current key and every old key *before* it decompresses or deserializes
anything; a body that fails is never unpickled. This module is the only one
that pickles.
"""
from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import json
import math
import os
import pickle
import socket
import time
import zlib
from typing import Any, Mapping, Optional

from kale.conf import settings
from kale.exceptions import (DecodeError, ImproperlyConfigured, MessageTooLargeError,
                             SerializationError)
from kale.transport import OutgoingMessage

FORMAT_TAG = 'kale1'
SERIALIZER_CODES = {'pickle': 'p', 'json': 'j'}
SERIALIZER_NAMES = {code: name for name, code in SERIALIZER_CODES.items()}
COMPRESSED, PLAIN = 'z', '-'
MAX_DECOMPRESSED_BYTES = 16 * 1024 * 1024
MIN_KEY_BYTES = 16

ATTR_TASK_ID = 'kale_task_id'
ATTR_TASK_NAME = 'kale_task_name'
ATTR_RETRY_NUM = 'kale_retry_num'
ATTR_FAILURE_NUM = 'kale_failure_num'

NO_KEY_HELP = (
    'MESSAGE_SIGNING_KEY is not set: every message is signed, so publishers and workers '
    'need the same secret key. Make one with '
    '`python -c "import secrets; print(secrets.token_hex(32))"` and set '
    'MESSAGE_SIGNING_KEY to it in your settings module (KALE_SETTINGS_MODULE)')


@dataclasses.dataclass(frozen=True)
class Message:
    """One task invocation: what to run, with what, and its delivery history."""

    task_id: str
    task_name: str
    args: tuple = ()
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    app_data: Any = None
    retry_num: int = 0
    failure_num: int = 0
    enqueued_at: float = 0.0
    publisher: str = ''
    #: Earlier deliveries that ended with nobody settling the message (the
    #: worker holding it died), carried over when it is re-sent as a copy.
    unsettled: int = 0

    def attributes(self) -> dict[str, Any]:
        """SQS message attributes, so operators see these without decoding."""
        return {ATTR_TASK_ID: self.task_id, ATTR_TASK_NAME: self.task_name,
                ATTR_RETRY_NUM: self.retry_num, ATTR_FAILURE_NUM: self.failure_num}

    def next_attempt(self) -> 'Message':
        """The copy to publish for a retry after a failure (counts incremented)."""
        return dataclasses.replace(self, retry_num=self.retry_num + 1,
                                   failure_num=self.failure_num + 1,
                                   enqueued_at=time.time(), publisher=publisher_identity())

    def to_payload(self) -> dict[str, Any]:
        return {'id': self.task_id, 'task': self.task_name, 'args': tuple(self.args),
                'kwargs': dict(self.kwargs), 'app_data': self.app_data,
                'retry_num': self.retry_num, 'failure_num': self.failure_num,
                'enqueued_at': self.enqueued_at, 'publisher': self.publisher,
                'unsettled': self.unsettled}

    @classmethod
    def from_payload(cls, payload: Any) -> 'Message':
        """Build from a deserialized payload; ValueError says what is wrong."""
        if not isinstance(payload, dict):
            raise ValueError('payload is a %s, not a mapping' % type(payload).__name__)
        missing = {'id', 'task', 'args', 'kwargs'} - set(payload)
        if missing:
            raise ValueError('payload lacks %s' % ', '.join(sorted(missing)))
        checks = [('id', str), ('task', str), ('args', (list, tuple)), ('kwargs', dict),
                  ('retry_num', int), ('failure_num', int), ('enqueued_at', (int, float)),
                  ('publisher', str), ('unsettled', int)]
        for key, kinds in checks:
            if key in payload and (not isinstance(payload[key], kinds)
                                   or isinstance(payload[key], bool)):
                raise ValueError('payload field %r has type %s' % (key, type(payload[key]).__name__))
        if not all(isinstance(name, str) for name in payload['kwargs']):
            raise ValueError('payload kwargs have a non-string name')
        if min(payload.get('retry_num', 0), payload.get('failure_num', 0),
               payload.get('unsettled', 0)) < 0:
            raise ValueError('payload has a negative count')
        return cls(task_id=payload['id'], task_name=payload['task'], args=tuple(payload['args']),
                   kwargs=payload['kwargs'], app_data=payload.get('app_data'),
                   retry_num=payload.get('retry_num', 0), failure_num=payload.get('failure_num', 0),
                   enqueued_at=float(payload.get('enqueued_at', 0.0)),
                   publisher=payload.get('publisher', ''), unsettled=payload.get('unsettled', 0))


def publisher_identity() -> str:
    """Who published: host name and process id."""
    return '%s[%d]' % (socket.gethostname(), os.getpid())


# --- keys and signatures ---------------------------------------------------

def _key_bytes(key: Any, setting: str) -> bytes:
    if isinstance(key, str):
        key = key.encode('utf-8')
    if not isinstance(key, bytes):
        raise ImproperlyConfigured('%s must be a string, got %s' % (setting, type(key).__name__))
    if len(key) < MIN_KEY_BYTES:
        raise ImproperlyConfigured('%s is too short (%d bytes); use at least %d, ideally 32 '
                                   'random bytes' % (setting, len(key), MIN_KEY_BYTES))
    return key


_keys_cache: dict[int, tuple[bytes, list[bytes]]] = {}


def signing_keys() -> tuple[bytes, list[bytes]]:
    """The key that signs and every key that verifies (current first)."""
    cached = _keys_cache.get(settings.generation)
    if cached is None:
        cached = _read_signing_keys()
        _keys_cache.clear()
        _keys_cache[settings.generation] = cached
    return cached


def _read_signing_keys() -> tuple[bytes, list[bytes]]:
    if not settings.MESSAGE_SIGNING_KEY:
        raise ImproperlyConfigured(NO_KEY_HELP)
    current = _key_bytes(settings.MESSAGE_SIGNING_KEY, 'MESSAGE_SIGNING_KEY')
    old = settings.MESSAGE_SIGNING_OLD_KEYS or ()
    if isinstance(old, (str, bytes)):
        old = (old,)
    return current, [current] + [_key_bytes(k, 'MESSAGE_SIGNING_OLD_KEYS') for k in old]


def _signature(key: bytes, signed: bytes) -> bytes:
    return base64.urlsafe_b64encode(hmac.new(key, signed, hashlib.sha256).digest()).rstrip(b'=')


def _verified(signature: str, signed: bytes, keys: list[bytes]) -> bool:
    given = signature.encode('utf-8', 'surrogatepass')
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(_signature(key, signed), given)
    return matched


# --- serialization -----------------------------------------------------------

def _serialize(payload: dict[str, Any], serializer: str) -> bytes:
    if serializer == 'pickle':
        return pickle.dumps(payload, protocol=settings.PICKLE_PROTOCOL)
    if serializer == 'json':
        return json.dumps(payload, separators=(',', ':'), ensure_ascii=True,
                          allow_nan=False).encode('ascii')
    raise ImproperlyConfigured("SERIALIZER must be 'pickle' or 'json', got %r" % (serializer,))


def _deserialize(raw: bytes, serializer: str) -> Any:
    if serializer == 'pickle':
        return pickle.loads(raw)
    return json.loads(raw.decode('utf-8'))


def _b64_length(n: int) -> int:
    return 4 * math.ceil(n / 3)


def encode(message: Message, serializer: Optional[str] = None) -> str:
    """The signed body for ``message``. Raises SerializationError naming the task."""
    serializer = serializer or settings.SERIALIZER
    if serializer not in SERIALIZER_CODES:
        raise ImproperlyConfigured("SERIALIZER must be 'pickle' or 'json', got %r" % (serializer,))
    key, _ = signing_keys()
    try:
        raw = _serialize(message.to_payload(), serializer)
    except (pickle.PicklingError, TypeError, ValueError, AttributeError, RecursionError) as exc:
        raise SerializationError('task %s: arguments cannot be serialized with %s: %s: %s'
                                 % (message.task_name, serializer, type(exc).__name__, exc)) from exc
    plain_length = len(raw) if serializer == 'json' else _b64_length(len(raw))
    compressed = None
    if len(raw) >= settings.COMPRESSION_MIN_BYTES:
        squeezed = zlib.compress(raw, 6)
        if _b64_length(len(squeezed)) < plain_length:
            compressed = squeezed
    if compressed is not None:
        flags, data = SERIALIZER_CODES[serializer] + COMPRESSED, base64.b64encode(compressed)
    elif serializer == 'json':
        flags, data = SERIALIZER_CODES[serializer] + PLAIN, raw
    else:
        flags, data = SERIALIZER_CODES[serializer] + PLAIN, base64.b64encode(raw)
    header = ('%s:%s:' % (FORMAT_TAG, flags)).encode('ascii')
    signature = _signature(key, header + data)
    return (header + signature + b':' + data).decode('ascii')


def to_outgoing(message: Message, delay_sec: int = 0,
                extra_attributes: Optional[Mapping[str, Any]] = None) -> OutgoingMessage:
    """Encode ``message`` for sending and check it against SQS_TASK_SIZE_LIMIT."""
    attributes = message.attributes()
    attributes.update(extra_attributes or {})
    outgoing = OutgoingMessage(encode(message), attributes, delay_sec)
    limit = settings.SQS_TASK_SIZE_LIMIT
    size = outgoing.size()
    if size > limit:
        raise MessageTooLargeError(
            'task %s (%s): encoded message is %d bytes, over SQS_TASK_SIZE_LIMIT of %d bytes'
            % (message.task_name, message.task_id, size, limit))
    return outgoing


# --- decoding ------------------------------------------------------------------

def _decompress(data: bytes) -> bytes:
    inflater = zlib.decompressobj()
    raw = inflater.decompress(data, MAX_DECOMPRESSED_BYTES)
    if inflater.unconsumed_tail:
        raise ValueError('decompresses to more than %d bytes' % MAX_DECOMPRESSED_BYTES)
    if not inflater.eof:
        raise ValueError('compressed data is truncated')
    return raw


def verify(body: str) -> tuple[str, bytes]:
    """Check the envelope and signature; returns (flags, data). Nothing is deserialized."""
    if not isinstance(body, str):
        raise DecodeError(DecodeError.NOT_KALE, 'body is %s, not text' % type(body).__name__)
    limit = settings.SQS_TASK_SIZE_LIMIT
    if len(body) > limit:       # no publisher made it: refuse before hashing it
        raise DecodeError(DecodeError.TOO_LARGE, 'body of %d characters is over '
                          'SQS_TASK_SIZE_LIMIT of %d bytes' % (len(body), limit), body)
    parts = body.split(':', 3)
    if len(parts) != 4 or parts[0] != FORMAT_TAG:
        raise DecodeError(DecodeError.NOT_KALE, 'body does not start with a %s header'
                          % FORMAT_TAG, body)
    tag, flags, signature, data = parts
    signed = ('%s:%s:%s' % (tag, flags, data)).encode('utf-8', 'surrogatepass')
    _, keys = signing_keys()
    if not _verified(signature, signed, keys):
        raise DecodeError(DecodeError.BAD_SIGNATURE,
                          'signature does not match MESSAGE_SIGNING_KEY or any old key', body)
    return flags, data.encode('utf-8', 'surrogatepass')


def decode(body: str, resolve: bool = True) -> Message:
    """Verify, then deserialize, a body into a Message.

    With ``resolve`` (the default) the task class must also be importable.
    Every failure is a DecodeError whose ``reason`` says which check failed.
    """
    flags, data = verify(body)
    if len(flags) != 2 or flags[0] not in SERIALIZER_NAMES or flags[1] not in (COMPRESSED, PLAIN):
        raise DecodeError(DecodeError.CORRUPT, 'unknown format flags %r' % (flags,), body)
    serializer = SERIALIZER_NAMES[flags[0]]
    try:
        if flags[1] == COMPRESSED or serializer == 'pickle':
            data = base64.b64decode(data, validate=True)
        if flags[1] == COMPRESSED:
            data = _decompress(data)
        message = Message.from_payload(_deserialize(data, serializer))
    except (binascii.Error, zlib.error, ValueError) as exc:
        raise DecodeError(DecodeError.CORRUPT, str(exc), body) from exc
    except Exception as exc:  # unpickling a signed body can raise anything
        raise DecodeError(DecodeError.CORRUPT, '%s: %s' % (type(exc).__name__, exc), body) from exc
    if resolve:
        try:
            resolve_task(message.task_name)
        except DecodeError as exc:
            exc.body = body
            raise
    return message


_resolved: dict[tuple[int, str], type] = {}


def resolve_task(task_name: str) -> type:
    """The Task class a message names, after TASK_MAPPER; DecodeError if unknown."""
    key = (settings.generation, task_name)
    found = _resolved.get(key)
    if found is None:
        found = _resolve_task(task_name)
        if len(_resolved) > 1000:
            _resolved.clear()
        _resolved[key] = found
    return found


def _resolve_task(task_name: str) -> type:
    from kale.task import Task  # here: kale.task imports this module
    mapper = settings.TASK_MAPPER or {}
    target = mapper.get(task_name, task_name)
    found, problem = _import_path(target)
    if found is not None and not (isinstance(found, type) and issubclass(found, Task)):
        problem = 'is not a kale Task class'
    if problem:
        raise DecodeError(DecodeError.UNKNOWN_TASK, 'task %r %s' % (task_name, problem))
    return found


def _import_path(path: str) -> tuple[Any, str]:
    """Import ``package.module.Class`` (or a nested class): (it, '') or (None, why not)."""
    import importlib

    parts = path.split('.')
    for split in range(len(parts) - 1, 0, -1):
        module_name = '.'.join(parts[:split])
        try:
            found: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and (module_name == exc.name or module_name.startswith(exc.name + '.')):
                continue
            return None, 'cannot be imported: module %s needs %s' % (module_name, exc)
        except Exception as exc:   # the task's module itself is broken: say how
            return None, 'cannot be imported: module %s raised %s: %s' % (
                module_name, type(exc).__name__, exc)
        for attr in parts[split:]:
            found = getattr(found, attr, None)
            if found is None:
                return None, 'cannot be imported: %s has no %s' % (module_name, attr)
        return found, ''
    return None, 'cannot be imported: no such module'
