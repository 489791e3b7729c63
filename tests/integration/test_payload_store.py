"""The payload store contract: every test runs against the in-memory store and
against S3 on the embedded endpoint (moto's server serves S3 on the SQS port)."""
from __future__ import annotations

import uuid

import pytest

from kale.app import default_app
from kale.conf import settings
from kale.exceptions import ImproperlyConfigured, PayloadMissingError, PayloadStoreError
from kale.transport.payloads import (
    MemoryPayloadStore,
    PayloadStore,
    using_payload_store,
)
from kale.transport.s3 import S3PayloadStore, make_s3_client
from tests.support.endpoint import raw_s3_client

KEY = 'kale-payloads/task-1'


@pytest.fixture(params=['memory', 's3'])
def store_and_bucket(request: pytest.FixtureRequest) -> tuple[PayloadStore, str]:
    bucket = 'contract-%s' % uuid.uuid4().hex[:12]
    if request.param == 'memory':
        return MemoryPayloadStore(bucket), bucket
    url = request.getfixturevalue('sqs_endpoint')
    client = raw_s3_client(url)
    client.create_bucket(Bucket=bucket)
    return S3PayloadStore(client), bucket


def test_an_object_put_is_got_back_byte_for_byte(store_and_bucket):
    store, bucket = store_and_bucket
    data = bytes(range(256)) * 1000
    store.put(bucket, KEY, data)
    assert store.get(bucket, KEY, len(data)) == data


def test_get_never_reads_more_than_one_byte_past_the_limit(store_and_bucket):
    store, bucket = store_and_bucket
    store.put(bucket, KEY, b'x' * 100)
    assert store.get(bucket, KEY, 10) == b'x' * 11


def test_a_missing_object_is_payload_missing(store_and_bucket):
    store, bucket = store_and_bucket
    with pytest.raises(PayloadMissingError, match='kale-payloads/nothing-here'):
        store.get(bucket, 'kale-payloads/nothing-here', 10)


def test_delete_removes_the_object_and_deleting_twice_is_no_error(store_and_bucket):
    store, bucket = store_and_bucket
    store.put(bucket, KEY, b'data')
    store.delete(bucket, KEY)
    store.delete(bucket, KEY)
    with pytest.raises(PayloadMissingError):
        store.get(bucket, KEY, 10)


def test_a_missing_bucket_is_a_store_error_naming_it(store_and_bucket):
    store, _bucket = store_and_bucket
    with pytest.raises(PayloadStoreError, match='no-such-bucket-here') as raised:
        store.put('no-such-bucket-here', KEY, b'data')
    assert not isinstance(raised.value, PayloadMissingError)


def test_the_s3_store_reaches_the_local_endpoint_from_the_settings(payload_bucket):
    store = default_app().payloads
    store.put(payload_bucket.name, KEY, b'from the settings')
    assert payload_bucket.read(KEY) == b'from the settings'
    assert default_app().payloads is store, 'one client per app'


def test_an_unreachable_s3_is_a_retryable_store_error():
    with settings.override(MESSAGE_QUEUE_ENDPOINT_URL='http://127.0.0.1:9',
                           SQS_CONNECT_TIMEOUT_SEC=1):
        store = S3PayloadStore(make_s3_client(settings.config))
        with pytest.raises(PayloadStoreError, match='unreachable') as raised:
            store.get('bucket', KEY, 10)
    assert raised.value.retryable


def test_without_a_region_the_s3_client_is_one_clear_line(monkeypatch):
    monkeypatch.delenv('AWS_DEFAULT_REGION', raising=False)
    monkeypatch.delenv('AWS_REGION', raising=False)
    monkeypatch.setenv('AWS_CONFIG_FILE', '/nonexistent')
    with settings.override(MESSAGE_QUEUE_ENDPOINT_URL='', AWS_REGION=''):
        with pytest.raises(ImproperlyConfigured, match='AWS_REGION'):
            make_s3_client(settings.config)


def test_using_payload_store_puts_another_store_in_place_for_the_block():
    memory = MemoryPayloadStore('b')
    with using_payload_store(memory):
        assert default_app().payloads is memory
    assert default_app().payloads is not memory
