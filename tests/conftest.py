"""Fixtures: test settings, and a real SQS endpoint (`kale sqs-local`) on 127.0.0.1."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import uuid
from typing import Any, Optional

import boto3
import pytest

from kale.conf import ENVIRONMENT_VARIABLE, settings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST_SETTINGS = 'tests.kale_test_settings'
URL_PATTERN = re.compile(r'(http://127\.0\.0\.1:\d+)')


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for a kale subprocess: the repo importable, test settings."""
    env = dict(os.environ)
    env['PYTHONPATH'] = ROOT + os.pathsep + env.get('PYTHONPATH', '')
    env[ENVIRONMENT_VARIABLE] = TEST_SETTINGS
    env['PYTHONUNBUFFERED'] = '1'
    env.update(extra)
    return env


class LocalEndpoint:
    """`kale sqs-local --port 0` in a subprocess; `url` once it answers."""

    def __init__(self, *extra_args: str):
        self.process = subprocess.Popen(
            [sys.executable, '-m', 'kale', 'sqs-local', '--port', '0', *extra_args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
            env=subprocess_env())
        self.lines: list[str] = []
        self.url = self._wait_for_url()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _wait_for_url(self, timeout: float = 30) -> str:
        deadline = time.time() + timeout
        assert self.process.stdout is not None
        while time.time() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            match = URL_PATTERN.search(line)
            if match:
                return match.group(1)
        self.process.kill()
        raise RuntimeError('kale sqs-local did not start: %s' % ''.join(self.lines))

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(5)
        return self.process.returncode


def raw_client(url: str) -> Any:
    return boto3.client('sqs', endpoint_url=url, region_name='us-east-1',
                        aws_access_key_id='test', aws_secret_access_key='test')


@pytest.fixture(autouse=True)
def test_settings(monkeypatch: pytest.MonkeyPatch):
    """Every test runs under tests.kale_test_settings, read afresh."""
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, TEST_SETTINGS)
    settings.reload()
    yield settings
    monkeypatch.undo()
    settings.reload()


@pytest.fixture(scope='session')
def sqs_endpoint():
    """One embedded endpoint for the session; tests isolate by QUEUE_PREFIX."""
    endpoint = LocalEndpoint()
    yield endpoint.url
    endpoint.stop()


class SQSHelper:
    """A test's view of the endpoint: its prefix and a raw boto3 client."""

    def __init__(self, url: str, prefix: str):
        self.url = url
        self.prefix = prefix
        self.client = raw_client(url)

    def queue_url(self, name: str) -> str:
        return self.client.get_queue_url(QueueName=self.prefix + name)['QueueUrl']

    def receive_all(self, name: str, expected: Optional[int] = None,
                    timeout: float = 5) -> list[dict[str, Any]]:
        """Everything visible in the queue (received, then deleted)."""
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


@pytest.fixture
def sqs(sqs_endpoint: str, monkeypatch: pytest.MonkeyPatch):
    """Settings pointed at the endpoint with queues of this test's own."""
    prefix = 't%s-' % uuid.uuid4().hex[:10]
    monkeypatch.setenv('KALE_TEST_ENDPOINT', sqs_endpoint)
    monkeypatch.setenv('KALE_TEST_PREFIX', prefix)
    settings.reload()
    yield SQSHelper(sqs_endpoint, prefix)


@pytest.fixture
def memory_broker():
    """A broker over the in-memory transport; Task.publish sends to it."""
    from kale import publisher
    from kale.broker import Broker
    from kale.memory_transport import MemoryTransport
    from kale.queue_config import get_queue_config
    broker = Broker(MemoryTransport(), get_queue_config())
    previous = publisher.set_publisher(publisher.Publisher(broker))
    yield broker
    publisher.set_publisher(previous)


@pytest.fixture
def record(tmp_path, monkeypatch):
    """The file tasks in tests/tasks.py record their events in (KALE_TEST_RECORD)."""
    path = str(tmp_path / 'record')
    monkeypatch.setenv('KALE_TEST_RECORD', path)
    return path
