"""The payload store contract: where payloads too big for an SQS message are
kept (``PAYLOAD_BUCKET`` on S3) as opaque bytes under a key, implemented by
:class:`kale.transport.s3.S3PayloadStore` and in memory by
:class:`MemoryPayloadStore` (unit tests, eager mode); one contract test suite runs against both.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator, Optional, Protocol

from kale.exceptions import PayloadMissingError, PayloadStoreError

#: Every payload object's key starts with this: the prefix a bucket lifecycle
#: rule expires, and the only one Kale's IAM policies need.
KEY_PREFIX = 'kale-payloads/'


class PayloadStore(Protocol):
    """Object operations the codec performs. Errors are
    :class:`~kale.exceptions.PayloadStoreError` (``PayloadMissingError`` for
    an object that does not exist)."""

    def put(self, bucket: str, key: str, data: bytes) -> None:
        """Store ``data`` as the object ``key`` (replacing one of that key)."""

    def get(self, bucket: str, key: str, max_bytes: int) -> bytes:
        """The object's bytes, but never more than ``max_bytes + 1`` of them: a
        longer answer means the object is bigger than ``max_bytes``, and the
        rest is not read."""

    def delete(self, bucket: str, key: str) -> None:
        """Delete the object; deleting one that does not exist is no error."""


class MemoryPayloadStore:
    """A :class:`PayloadStore` in memory, with a record of the calls made; buckets
    must be created first, as in S3 (:meth:`create_bucket`)."""

    def __init__(self, *buckets: str):
        self.objects: dict[tuple[str, str], bytes] = {}
        self.buckets = set(buckets)
        #: Keys of every put, get and delete, in order, for tests to count.
        self.puts: list[str] = []
        self.gets: list[str] = []
        self.deletes: list[str] = []
        self._lock = threading.Lock()

    def create_bucket(self, bucket: str) -> None:
        self.buckets.add(bucket)

    def _noted(self, bucket: str, key: str, calls: list[str]) -> tuple[str, str]:
        if bucket not in self.buckets:
            raise PayloadStoreError('payload bucket %r does not exist' % (bucket,), 'NoSuchBucket')
        calls.append(key)
        return bucket, key

    def put(self, bucket: str, key: str, data: bytes) -> None:
        with self._lock:
            self.objects[self._noted(bucket, key, self.puts)] = bytes(data)

    def get(self, bucket: str, key: str, max_bytes: int) -> bytes:
        with self._lock:
            data = self.objects.get(self._noted(bucket, key, self.gets))
        if data is None:
            raise PayloadMissingError('payload object s3://%s/%s does not exist' % (bucket, key), 'NoSuchKey')
        return data[:max_bytes + 1]

    def delete(self, bucket: str, key: str) -> None:
        with self._lock:
            self.objects.pop(self._noted(bucket, key, self.deletes), None)

    def keys(self, bucket: str) -> list[str]:
        """The keys of the objects in ``bucket``, sorted."""
        with self._lock:
            return sorted(key for b, key in self.objects if b == bucket)


_override: Optional[PayloadStore] = None


def replaced_payload_store() -> Optional[PayloadStore]:
    """The store :func:`using_payload_store` put in place of every app's S3 store, if any."""
    return _override


@contextlib.contextmanager
def using_payload_store(store: PayloadStore) -> Iterator[PayloadStore]:
    """Within the block, the codec keeps payloads in ``store`` (tests, eager mode)."""
    global _override
    previous, _override = _override, store
    try:
        yield store
    finally:
        _override = previous
