"""The payload store on S3, over boto3 (with :mod:`kale.transport.sqs`, the
only modules that talk to AWS).

The S3 client is built from the same settings as the SQS client: region and
credentials, and the endpoint when it is on this machine (``kale sqs-local``:
moto's server serves S3 on the same port as SQS). An endpoint elsewhere is an
SQS endpoint (a VPC endpoint for SQS, say), so payloads then go to AWS's S3
for the region. botocore's exceptions never leave this module: they become
:class:`kale.exceptions.PayloadStoreError`.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

import botocore.exceptions
from botocore.config import Config as BotoConfig

from kale import config as kale_config
from kale.exceptions import ImproperlyConfigured, PayloadMissingError, PayloadStoreError
from kale.transport.endpoint import endpoint_url, is_local
from kale.transport.sqs import (
    CREDENTIALS_ERRORS,
    THROTTLING_CODES,
    aws_session,
    no_credentials,
    one_line,
)

MISSING_KEY_CODES = frozenset({'NoSuchKey', '404', 'NotFound'})


def make_s3_client(config: kale_config.Config) -> Any:
    """A new boto3 S3 client built from ``config``; a setting boto3
    refuses is one ImproperlyConfigured line naming the settings involved."""
    kale = config
    endpoint = endpoint_url(kale)
    local = endpoint if is_local(endpoint) else ''
    try:
        session, region = aws_session(local, kale)
        boto_config = BotoConfig(connect_timeout=kale.SQS_CONNECT_TIMEOUT_SEC,
                        read_timeout=float(kale.SQS_READ_TIMEOUT_SEC),
                        retries={'mode': 'standard', 'max_attempts': 3},
                        # An emulator on 127.0.0.1 has no bucket host names.
                        s3={'addressing_style': 'path'} if local else None)
        return session.client('s3', endpoint_url=local or None, region_name=region,
                              config=boto_config)
    except (ValueError, botocore.exceptions.BotoCoreError) as exc:
        raise ImproperlyConfigured(
            'the S3 client for PAYLOAD_BUCKET cannot be built from MESSAGE_QUEUE_ENDPOINT_URL=%r '
            'and AWS_REGION=%r: %s' % (endpoint, kale.AWS_REGION, one_line(str(exc)))) from None


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

    def _client_error(self, exc: botocore.exceptions.ClientError, action: str, bucket: str,
                      where: str) -> PayloadStoreError:
        """What S3's error answer to ``action`` on ``where`` means: PayloadMissingError
        for an object GetObject does not find, else a PayloadStoreError saying why."""
        error = exc.response.get('Error', {})
        code = str(error.get('Code', '') or '')
        status = exc.response.get('ResponseMetadata', {}).get('HTTPStatusCode', 0)
        message = one_line(str(error.get('Message', '') or ''))
        if code in MISSING_KEY_CODES and action == 'GetObject':
            return PayloadMissingError('payload object %s does not exist' % where, code)
        if code == 'NoSuchBucket':
            return PayloadStoreError('%s %s: payload bucket %r does not exist at %s (create it, '
                                     'or correct PAYLOAD_BUCKET)' % (action, where, bucket,
                                                                     self.endpoint), code)
        return PayloadStoreError('%s %s: %s: %s' % (action, where, code, message), code,
                                 retryable=status >= 500 or code in THROTTLING_CODES)

    @contextlib.contextmanager
    def _errors(self, action: str, bucket: str, key: str) -> Iterator[None]:
        where = 's3://%s/%s' % (bucket, key)
        try:
            yield
        except botocore.exceptions.ClientError as exc:
            raise self._client_error(exc, action, bucket, where) from None
        except CREDENTIALS_ERRORS as exc:
            raise no_credentials(exc) from None
        except (botocore.exceptions.ConnectionError, botocore.exceptions.HTTPClientError) as exc:
            raise PayloadStoreError('%s %s: endpoint %s unreachable: %s'
                                    % (action, where, self.endpoint, exc), retryable=True) from None
        except botocore.exceptions.BotoCoreError as exc:    # e.g. a read cut short
            raise PayloadStoreError('%s %s failed: %s: %s' % (action, where, type(exc).__name__,
                                                              exc), retryable=True) from None

    def put(self, bucket: str, key: str, data: bytes) -> None:
        with self._errors('PutObject', bucket, key):
            self.client.put_object(Bucket=bucket, Key=key, Body=data,
                                   ContentType='application/octet-stream')

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
