"""The test endpoint and settings: how tests reach `kale sqs-local` (or the
endpoint KALE_TEST_SQS_ENDPOINT names) and start kale processes under the
test settings."""
from __future__ import annotations

import os
import time
from typing import Any, Optional
from urllib.parse import urlsplit

import boto3
from botocore.config import Config

from kale.conf import ENVIRONMENT_VARIABLE

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEST_SETTINGS = 'tests.kale_test_settings'
#: Aims the tests that need an SQS endpoint (the ``sqs_endpoint`` fixture: the
#: transport contract suite, the end-to-end tests) at one already running,
#: such as LocalStack's, instead of starting the embedded one (moto).
ENDPOINT_VARIABLE = 'KALE_TEST_SQS_ENDPOINT'


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for a kale subprocess: the repo importable, test settings."""
    env = dict(os.environ)
    # No empty entry: it would put the working directory on sys.path.
    env['PYTHONPATH'] = os.pathsep.join(p for p in [ROOT, env.get('PYTHONPATH', '')] if p)
    env[ENVIRONMENT_VARIABLE] = TEST_SETTINGS
    env['PYTHONUNBUFFERED'] = '1'
    env.update(extra)
    return env


def raw_client(url: str) -> Any:
    """A plain boto3 SQS client for the endpoint at ``url``."""
    return boto3.client('sqs', endpoint_url=url, region_name='us-east-1',
                        aws_access_key_id='test', aws_secret_access_key='test')


def raw_s3_client(url: str) -> Any:
    """A plain boto3 S3 client for the endpoint at ``url`` (moto serves S3 there too)."""
    return boto3.client('s3', endpoint_url=url, region_name='us-east-1',
                        aws_access_key_id='test', aws_secret_access_key='test')


def given_endpoint(url: str) -> str:
    """The endpoint at ``url`` (from ENDPOINT_VARIABLE), once it answers an
    SQS request; a ValueError in one line naming the variable when it is not
    an http(s)://host:port address or does not answer."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme not in ('http', 'https') or not parts.hostname or port is None \
            or parts.path.strip('/') or parts.query:
        raise ValueError('%s must be an endpoint such as http://127.0.0.1:4566, got %r'
                         % (ENDPOINT_VARIABLE, url))
    client = boto3.client('sqs', endpoint_url=url, region_name='us-east-1',
                          aws_access_key_id='test', aws_secret_access_key='test',
                          config=Config(retries={'max_attempts': 1}, connect_timeout=5,
                                        read_timeout=10))
    try:
        client.list_queues(MaxResults=1)
    except Exception as exc:
        raise ValueError('%s=%s: the endpoint does not answer an SQS request: %s'
                         % (ENDPOINT_VARIABLE, url, str(exc).splitlines()[0][:200])) from None
    return url.rstrip('/')


class SQSHelper:
    """A test's view of the endpoint: its prefix and a raw boto3 client."""

    def __init__(self, url: str, prefix: str):
        self.url = url
        self.prefix = prefix
        self.client = raw_client(url)

    def encode(self, message: Any, queue: str = 'default') -> str:
        """A body for ``message``, signed for this test's ``queue``."""
        from kale import codec
        return codec.encode(message, self.prefix + queue)

    def decode(self, body: str, queue: str = 'default') -> Any:
        """The message in a body received on this test's ``queue``."""
        from kale import codec
        return codec.decode(body, self.prefix + queue)

    def queue_url(self, name: str) -> str:
        return self.client.get_queue_url(QueueName=self.prefix + name)['QueueUrl']

    def count(self, name: str) -> int:
        """Messages in the queue, visible or in flight."""
        attributes = self.client.get_queue_attributes(
            QueueUrl=self.queue_url(name), AttributeNames=[
                'ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'])
        return sum(int(value) for value in attributes['Attributes'].values())

    def visible(self, name: str) -> int:
        """Messages in the queue that are visible (none in flight or delayed)."""
        attributes = self.client.get_queue_attributes(
            QueueUrl=self.queue_url(name), AttributeNames=['ApproximateNumberOfMessages'])
        return int(attributes['Attributes']['ApproximateNumberOfMessages'])

    def receive_all(self, name: str, expected: Optional[int] = None,
                    timeout: float = 30) -> list[dict[str, Any]]:
        """Everything visible in the queue (received, then deleted): with
        ``expected``, received until that many came or ``timeout`` passed."""
        url = self.queue_url(name)
        found: list[dict[str, Any]] = []
        deadline = time.time() + timeout
        while time.time() < deadline:
            batch = self.client.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0, VisibilityTimeout=30,
                MessageAttributeNames=['All'],
                MessageSystemAttributeNames=['ApproximateReceiveCount']).get('Messages', [])
            for message in batch:
                self.client.delete_message(QueueUrl=url, ReceiptHandle=message['ReceiptHandle'])
            found.extend(batch)
            if not batch and (expected is None or len(found) >= expected):
                break
        return found


class PayloadBucket:
    """An S3 bucket on the endpoint, created for one test, seen with raw boto3."""

    def __init__(self, url: str, name: str):
        self.name = name
        self.client = raw_s3_client(url)
        self.client.create_bucket(Bucket=name)

    def keys(self) -> list[str]:
        """Every object key in the bucket, sorted."""
        listing = self.client.list_objects_v2(Bucket=self.name)
        return sorted(item['Key'] for item in listing.get('Contents', []))

    def read(self, key: str) -> bytes:
        return bytes(self.client.get_object(Bucket=self.name, Key=key)['Body'].read())

    def write(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.name, Key=key, Body=data)
