"""The offloading step: a payload too big for an SQS message is kept in S3
(``PAYLOAD_BUCKET``), and the message carries a signed pointer to it
(docs/how-to/large-payloads.md; docs/explanation/internals-transport.md, "Offloading").
"""
from __future__ import annotations

import dataclasses
import hashlib
import hmac
import re
from typing import Callable, Optional, Sequence
from urllib.parse import quote

from kale.codec.pipeline import (
    PAYLOAD_BUCKET,
    PAYLOAD_KEY,
    PAYLOAD_SHA256,
    PAYLOAD_SIZE,
    Frame,
    Step,
)
from kale.codec.serialize import base64_length
from kale.exceptions import DecodeError, PayloadMissingError, PayloadStoreError
from kale.transport import OutgoingMessage
from kale.transport.payloads import KEY_PREFIX, PayloadStore

#: What encrypting adds to a payload (nonce and tag), with room to spare: an
#: object may be this much bigger than MAX_DECOMPRESSED_BYTES.
OBJECT_OVERHEAD_BYTES = 64
#: Hex digits of the SHA-256 in an object's key.
KEY_DIGEST_CHARS = 16

_SHA256_HEX = re.compile(r'[0-9a-f]{64}')


def object_key(task_id: str, digest: str) -> str:
    """The key of the object holding a payload of task ``task_id`` with SHA-256 ``digest``."""
    return '%s%s/%s' % (KEY_PREFIX, quote(task_id, safe=''), digest[:KEY_DIGEST_CHARS])


@dataclasses.dataclass(frozen=True)
class Pointer:
    """Where a payload is kept, and what it must be."""

    bucket: str
    key: str
    size: int
    sha256: str

    @property
    def url(self) -> str:
        return 's3://%s/%s' % (self.bucket, self.key)


def pointer(frame: Frame) -> Optional[Pointer]:
    """The pointer in an opened frame's signed headers, or None when the
    payload travels in the body; DecodeError when the pointer is malformed."""
    if not frame.offloaded:
        return None
    headers = frame.headers
    bucket, key = headers.get(PAYLOAD_BUCKET, ''), headers.get(PAYLOAD_KEY, '')
    size, digest = headers.get(PAYLOAD_SIZE, ''), headers.get(PAYLOAD_SHA256, '')
    if not (bucket and key and size.isascii() and size.isdigit() and _SHA256_HEX.fullmatch(digest)):
        raise DecodeError(DecodeError.CORRUPT, 'pointer to a payload in S3 is malformed: bucket '
                          '%r, key %r, size %r, sha256 %r' % (bucket, key, size, digest))
    return Pointer(bucket, key, int(size), digest)


class OffloadStep:
    """Keeps payloads over the threshold in S3; fetches and checks them back."""

    name = 'offload'
    plain_header = (PAYLOAD_KEY, None)   # no pointer: decode does nothing

    def __init__(self, bucket: str, threshold: int, max_bytes: int, envelope_steps: Sequence[Step],
                 store: Callable[[], PayloadStore]):
        #: Where new payloads go, and the only bucket a pointer may name; ''
        #: keeps every payload in its message (and refuses pointers).
        self.bucket = bucket
        self.threshold = threshold
        #: Largest object a pointer may name (MAX_DECOMPRESSED_BYTES and overhead).
        self.max_bytes = max_bytes + OBJECT_OVERHEAD_BYTES
        self.envelope_steps = list(envelope_steps)
        self.store = store

    def encode(self, frame: Frame) -> None:
        if not self.bucket or self._message_size(frame) <= self.threshold:
            return
        data = frame.data
        digest = hashlib.sha256(data).hexdigest()
        key = object_key(frame.task_id, digest)
        try:
            self.store().put(self.bucket, key, data)
        except PayloadStoreError as exc:
            raise type(exc)('%s: payload of %d bytes could not be stored in S3: %s'
                            % (frame.label, len(data), exc), exc.code, exc.retryable) from None
        frame.headers.update({PAYLOAD_BUCKET: self.bucket, PAYLOAD_KEY: key,
                              PAYLOAD_SIZE: str(len(data)), PAYLOAD_SHA256: digest})
        frame.data, frame.text = b'', True

    def _message_size(self, frame: Frame) -> int:
        """The size SQS would count of the frame's message with its payload in the body."""
        attributes = OutgoingMessage('', frame.attributes).size()
        wire = len(frame.data) if frame.text else base64_length(len(frame.data))
        if wire + attributes > self.threshold:      # over, whatever the envelope adds
            return wire + attributes
        trial = dataclasses.replace(frame, headers=dict(frame.headers))
        for step in self.envelope_steps:
            step.encode(trial)
        return OutgoingMessage(trial.body, frame.attributes).size()

    def decode(self, frame: Frame) -> None:
        found = pointer(frame)
        if found is None:
            return
        self._check_pointer(frame, found)
        try:
            data = self.store().get(found.bucket, found.key, found.size)
        except PayloadMissingError:
            raise DecodeError(DecodeError.PAYLOAD_MISSING, 'payload object %s does not exist '
                              '(deleted after its task succeeded, or expired by the bucket\'s '
                              'lifecycle rule)' % found.url) from None
        if len(data) != found.size:
            raise DecodeError(DecodeError.PAYLOAD_MISMATCH, 'payload object %s is %s bytes, its signed '
                              'pointer says %d' % (found.url, 'more than %d' % found.size
                                                   if len(data) > found.size else len(data), found.size))
        if not hmac.compare_digest(hashlib.sha256(data).hexdigest(), found.sha256):
            raise DecodeError(DecodeError.PAYLOAD_MISMATCH, 'payload object %s does not match the SHA-256 '
                              'of its signed pointer (changed since it was published)' % found.url)
        frame.data = data

    def _check_pointer(self, frame: Frame, found: Pointer) -> None:
        """Refuse a pointer beside data, to another bucket, outside the prefix or to too large an object."""
        if frame.data:
            raise DecodeError(DecodeError.CORRUPT, 'body carries data besides its pointer to %s' % found.url)
        # Signed or not, a pointer reads only Kale's own objects: the
        # configured bucket, under the payload prefix, no path tricks.
        if found.bucket != self.bucket:
            raise DecodeError(DecodeError.CORRUPT, 'pointer names bucket %r, not PAYLOAD_BUCKET %r'
                              % (found.bucket[:100], self.bucket))
        if not found.key.startswith(KEY_PREFIX) or '..' in found.key.split('/') \
                or '//' in found.key:
            raise DecodeError(DecodeError.CORRUPT, 'pointer names key %r, outside %s'
                              % (found.key[:200], KEY_PREFIX))
        if found.size > self.max_bytes:
            raise DecodeError(DecodeError.TOO_LARGE, 'payload object %s of %d bytes is over the %d bytes '
                              'MAX_DECOMPRESSED_BYTES allows' % (found.url, found.size, self.max_bytes))

    def discard(self, frame: Frame) -> None:
        """Delete the object an opened frame points at (nothing if it has none)."""
        found = pointer(frame)
        if found is not None:
            self.store().delete(found.bucket, found.key)
