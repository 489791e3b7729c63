"""The payload store on S3 over boto3 (docs/explanation/internals-transport.md,
"The AWS modules"); botocore's exceptions become
:class:`kale.exceptions.PayloadStoreError`.
"""
from __future__ import annotations

import functools
from typing import Any, ContextManager, Optional

from kale import config as kale_config
from kale.exceptions import PayloadMissingError, PayloadStoreError
from kale.transport.endpoint import endpoint_url, is_local
from kale.transport.sqs import aws_client, aws_errors

MISSING_KEY_CODES = frozenset({'NoSuchKey', '404', 'NotFound'})


def make_s3_client(config: kale_config.Config) -> Any:
    """A new boto3 S3 client built from ``config``."""
    endpoint = endpoint_url(config)
    local = endpoint if is_local(endpoint) else ''
    return aws_client('s3', local, config, 'S3 client for PAYLOAD_BUCKET',
                      retries={'mode': 'standard', 'max_attempts': 3},
                      # An emulator on 127.0.0.1 has no bucket host names.
                      s3={'addressing_style': 'path'} if local else None)


class S3PayloadStore:
    """:class:`kale.transport.payloads.PayloadStore` over a boto3 S3 client."""

    def __init__(self, client: Any = None, config: Optional[kale_config.Config] = None):
        """Over ``client``, or one built from ``config``."""
        if client is None:
            if config is None:
                raise TypeError('S3PayloadStore needs a client or a configuration')
            client = make_s3_client(config)
        self.client = client
        self.endpoint = self.client.meta.endpoint_url

    def _client_error(self, action: str, bucket: str, where: str, code: str, status: int,
                      message: str) -> Optional[PayloadStoreError]:
        """PayloadMissingError for an object GetObject does not find, the
        bucket's for a bucket missing (None: the usual error)."""
        if code in MISSING_KEY_CODES and action == 'GetObject':
            return PayloadMissingError('payload object %s does not exist' % where, code)
        if code == 'NoSuchBucket':
            return PayloadStoreError('%s %s: payload bucket %r does not exist at %s (create it, or correct '
                                     'PAYLOAD_BUCKET)' % (action, where, bucket, self.endpoint), code)
        return None

    def _errors(self, action: str, bucket: str, key: str) -> ContextManager[None]:
        where = 's3://%s/%s' % (bucket, key)
        return aws_errors(PayloadStoreError, '%s %s' % (action, where), self.endpoint,
                          functools.partial(self._client_error, action, bucket, where))

    def put(self, bucket: str, key: str, data: bytes) -> None:
        with self._errors('PutObject', bucket, key):
            self.client.put_object(Bucket=bucket, Key=key, Body=data, ContentType='application/octet-stream')

    def get(self, bucket: str, key: str, max_bytes: int) -> bytes:
        with self._errors('GetObject', bucket, key):
            body = self.client.get_object(Bucket=bucket, Key=key)['Body']
            try:
                return bytes(body.read(max_bytes + 1))     # never more than that is read
            finally:
                body.close()

    def delete(self, bucket: str, key: str) -> None:
        with self._errors('DeleteObject', bucket, key):
            self.client.delete_object(Bucket=bucket, Key=key)
