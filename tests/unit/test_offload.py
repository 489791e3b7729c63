"""The codec's offloading step, over the in-memory payload store: payloads over
PAYLOAD_OFFLOAD_BYTES go to the bucket, the message carries a signed pointer,
and what comes back is checked before anything is decoded."""
import dataclasses
import hashlib
import os
import time

import pytest

from kale import codec
from kale.codec.keys import key_id, signing_keys
from kale.codec.pipeline import PAYLOAD_KEY, PAYLOAD_SHA256, PAYLOAD_SIZE
from kale.conf import settings
from kale.exceptions import (
    DecodeError,
    ImproperlyConfigured,
    MessageTooLargeError,
    PayloadStoreError,
)
from kale.message import Message
from kale.transport.payloads import MemoryPayloadStore, using_payload_store
from tests.support.hostile import envelope_headers, signed_body
from tests.support.unavailable import require_module

QUEUE = 'tq-default'
BUCKET = 'payload-bucket'
BIG = 3 * 1024 * 1024


def make_message(data=b'', **changes):
    fields = dict(task_id='task-1', task_name='tests.tasks.EchoTask', args=(data,),
                  kwargs={'k': 1}, published_at=float(int(time.time())))
    fields.update(changes)
    return Message(**fields)


def pointer_body(app, **pointer):
    """A body for QUEUE with the pointer headers ``pointer`` and no data,
    correctly signed with ``app``'s current key."""
    key = signing_keys(config=app.config).current
    headers = envelope_headers(QUEUE, k=key_id(key), **pointer)
    return signed_body(b'', headers, QUEUE, key=key)


@pytest.fixture
def store():
    """The payload store the codec keeps payloads in, in memory."""
    memory = MemoryPayloadStore(BUCKET)
    with using_payload_store(memory):
        yield memory


@pytest.fixture
def bucket_app(app, store):
    """The test app with PAYLOAD_BUCKET set: its codec keeps big payloads in ``store``."""
    return app.replace(PAYLOAD_BUCKET=BUCKET)


def test_a_payload_over_the_limit_is_kept_in_the_bucket_under_its_task_id(store, bucket_app):
    message = make_message(os.urandom(BIG))
    outgoing = bucket_app.codec.to_outgoing(message, QUEUE)
    assert outgoing.size() < 1024, 'the message carries a pointer, not the data'
    [key] = store.keys(BUCKET)
    assert key.startswith('kale-payloads/task-1/')
    assert bucket_app.codec.decode(outgoing.body, QUEUE) == message


def test_the_pointer_names_bucket_key_size_and_sha256_and_is_signed(store, bucket_app):
    outgoing = bucket_app.codec.to_outgoing(make_message(os.urandom(BIG)), QUEUE)
    envelope = bucket_app.codec.open(outgoing.body, QUEUE)
    [key] = store.keys(BUCKET)
    stored = store.objects[BUCKET, key]
    assert envelope.headers['b'] == BUCKET
    assert envelope.headers[PAYLOAD_KEY] == key
    assert envelope.headers[PAYLOAD_SIZE] == str(len(stored))
    assert envelope.headers[PAYLOAD_SHA256] == hashlib.sha256(stored).hexdigest()
    digest = envelope.headers[PAYLOAD_SHA256]
    assert digest in outgoing.body
    forged = outgoing.body.replace(digest, hashlib.sha256(b'other data').hexdigest())
    with pytest.raises(DecodeError) as raised:
        bucket_app.codec.decode(forged, QUEUE)
    assert raised.value.reason == DecodeError.BAD_SIGNATURE


def test_a_payload_under_the_limit_stays_in_its_message(store, bucket_app):
    message = make_message(b'small')
    the_codec = bucket_app.codec
    assert the_codec.decode(the_codec.encode(message, QUEUE).body, QUEUE) == message
    assert store.puts == []


def test_payload_offload_bytes_lowers_the_threshold(store, bucket_app):
    message = make_message(os.urandom(4000))
    lowered = bucket_app.replace(PAYLOAD_OFFLOAD_BYTES=2000)
    body = lowered.codec.encode(message, QUEUE).body
    assert len(store.puts) == 1
    assert lowered.codec.decode(body, QUEUE) == message


def test_the_threshold_never_exceeds_sqs_task_size_limit(store, bucket_app):
    capped = bucket_app.replace(PAYLOAD_OFFLOAD_BYTES=1048576, SQS_TASK_SIZE_LIMIT=262144)
    assert codec.offload_threshold(capped.config) == 262144
    capped.codec.encode(make_message(os.urandom(300000)), QUEUE)
    assert len(store.puts) == 1


def test_without_a_bucket_a_big_payload_is_refused_at_publish_naming_payload_bucket(app):
    store = MemoryPayloadStore(BUCKET)
    with using_payload_store(store):
        with pytest.raises(MessageTooLargeError, match='PAYLOAD_BUCKET'):
            app.replace(PAYLOAD_BUCKET='').codec.to_outgoing(make_message(os.urandom(BIG)), QUEUE)
    assert store.puts == []


def test_a_bucket_that_refuses_the_object_is_an_error_at_publish(bucket_app):
    elsewhere = bucket_app.replace(PAYLOAD_BUCKET='another-bucket')
    with pytest.raises(PayloadStoreError, match=r'task tests.tasks.EchoTask \(task-1\).*'
                                                'another-bucket'):
        elsewhere.codec.to_outgoing(make_message(os.urandom(BIG)), QUEUE)


def test_the_size_that_counts_is_after_compression(store, bucket_app):
    message = make_message(b'a' * BIG)
    body = bucket_app.codec.encode(message, QUEUE).body
    assert store.puts == [], '3 MB of one letter compresses to a few kB'
    assert bucket_app.codec.decode(body, QUEUE) == message


def test_the_object_is_encrypted_with_the_message_encryption_key(store, bucket_app):
    require_module('cryptography', 'MESSAGE_ENCRYPTION_KEY encrypts with its AES-GCM')
    data = os.urandom(BIG)
    encrypting = bucket_app.replace(MESSAGE_ENCRYPTION_KEY='k' * 40)
    body = encrypting.codec.encode(make_message(data), QUEUE).body
    [key] = store.keys(BUCKET)
    assert data[:64] not in store.objects[BUCKET, key]
    assert encrypting.codec.decode(body, QUEUE).args == (data,)


# --- what comes back is checked ------------------------------------------------

def _tamper(store, change):
    [key] = store.keys(BUCKET)
    store.objects[BUCKET, key] = change(store.objects[BUCKET, key])


@pytest.mark.parametrize('change', [
    lambda data: data[:-1] + bytes([data[-1] ^ 1]),      # same size, another digest
    lambda data: data[:-10],                              # shorter
    lambda data: data + b'more',                          # longer
])
def test_an_object_changed_since_publish_is_refused_as_payload_mismatch(store, bucket_app, change):
    body = bucket_app.codec.encode(make_message(os.urandom(BIG)), QUEUE).body
    _tamper(store, change)
    with pytest.raises(DecodeError) as raised:
        bucket_app.codec.decode(body, QUEUE)
    assert raised.value.reason == DecodeError.PAYLOAD_MISMATCH
    assert 's3://%s/kale-payloads/task-1/' % BUCKET in str(raised.value)


def test_an_object_that_is_gone_is_refused_as_payload_missing(store, bucket_app):
    body = bucket_app.codec.encode(make_message(os.urandom(BIG)), QUEUE).body
    store.objects.clear()
    with pytest.raises(DecodeError) as raised:
        bucket_app.codec.decode(body, QUEUE)
    assert raised.value.reason == DecodeError.PAYLOAD_MISSING


def test_a_pointer_to_more_than_max_decompressed_bytes_is_refused_before_any_request(store,
                                                                                      bucket_app):
    body = pointer_body(bucket_app, b=BUCKET, o='kale-payloads/x/0', l=str(10 ** 9), h='0' * 64)
    with pytest.raises(DecodeError) as raised:
        bucket_app.codec.decode(body, QUEUE)
    assert raised.value.reason == DecodeError.TOO_LARGE
    assert store.gets == []


def test_a_malformed_pointer_is_refused_as_corrupt(bucket_app):
    body = pointer_body(bucket_app, b=BUCKET, o='kale-payloads/x/0', l='ten', h='zz')
    with pytest.raises(DecodeError) as raised:
        bucket_app.codec.decode(body, QUEUE)
    assert raised.value.reason == DecodeError.CORRUPT


def test_a_store_outage_on_read_is_a_store_error_not_a_decode_error(store, bucket_app):
    body = bucket_app.codec.encode(make_message(os.urandom(BIG)), QUEUE).body
    store.buckets.clear()
    with pytest.raises(PayloadStoreError):
        bucket_app.codec.decode(body, QUEUE)


def test_a_pointer_reads_only_the_configured_bucket_under_the_payload_prefix(bucket_app):
    message = make_message(os.urandom(BIG))
    body = bucket_app.codec.encode(message, QUEUE).body
    with pytest.raises(DecodeError, match="names bucket .*, not PAYLOAD_BUCKET ''"):
        bucket_app.replace(PAYLOAD_BUCKET='').codec.decode(body, QUEUE)
    with pytest.raises(DecodeError, match='not PAYLOAD_BUCKET'):
        bucket_app.replace(PAYLOAD_BUCKET='another-bucket').codec.decode(body, QUEUE)
    assert bucket_app.codec.decode(body, QUEUE) == message


@pytest.mark.parametrize('key', ['other/secret', 'kale-payloads/../etc/passwd',
                                 'kale-payloads//x'])
def test_a_signed_pointer_outside_the_payload_prefix_is_refused(bucket_app, key):
    the_codec = bucket_app.codec
    frame = the_codec.open(the_codec.encode(make_message(os.urandom(BIG)), QUEUE).body, QUEUE)
    step = next(step for step in the_codec.payload_steps if step.name == 'offload')
    frame.headers[PAYLOAD_KEY] = key
    frame.data = b''
    with pytest.raises(DecodeError, match='outside kale-payloads/'):
        step.decode(frame)


# --- copies reuse the object --------------------------------------------------

def test_a_retry_copy_points_at_the_same_object_with_its_own_counts(store, bucket_app):
    message = make_message(os.urandom(BIG))
    the_codec = bucket_app.codec
    envelope = the_codec.open(the_codec.encode(message, QUEUE).body, QUEUE)
    retry = the_codec.reissue(envelope, message.next_attempt(), QUEUE, delay_sec=5)
    assert len(store.puts) == 1, 'not uploaded again'
    assert retry.delay_sec == 5
    again = the_codec.decode(retry.body, QUEUE)
    assert (again.retry_num, again.failure_num) == (1, 1)
    assert again.args == message.args
    assert retry.attributes['kale_retry_num'] == 1


def test_a_copy_of_a_small_message_is_encoded_afresh(store, bucket_app):
    message = make_message(b'small')
    the_codec = bucket_app.codec
    envelope = the_codec.open(the_codec.encode(message, QUEUE).body, QUEUE)
    copy = the_codec.reissue(envelope, dataclasses.replace(message, retry_num=3), QUEUE)
    assert the_codec.decode(copy.body, QUEUE).retry_num == 3
    assert store.puts == []


def test_discard_deletes_the_object_a_message_points_at(store, bucket_app):
    the_codec = bucket_app.codec
    envelope = the_codec.open(the_codec.encode(make_message(os.urandom(BIG)), QUEUE).body, QUEUE)
    the_codec.discard(envelope)
    assert store.keys(BUCKET) == []
    the_codec.discard(the_codec.open(the_codec.encode(make_message(b'x'), QUEUE).body, QUEUE))


# --- settings -----------------------------------------------------------------

@pytest.mark.parametrize('name,value,problem', [
    ('PAYLOAD_BUCKET', 'Not_A_Bucket', 'must be an S3 bucket name'),
    ('PAYLOAD_BUCKET', None, 'must be an S3 bucket name'),
    ('PAYLOAD_OFFLOAD_BYTES', 'big', 'must be a whole number'),
    ('PAYLOAD_OFFLOAD_BYTES', -1, 'must be a whole number from 0 to 1048576'),
    ('PAYLOAD_OFFLOAD_BYTES', 2 * 1048576, 'must be a whole number from 0 to 1048576'),
])
def test_a_wrong_payload_setting_is_one_line_naming_it(app, name, value, problem):
    with pytest.raises(ImproperlyConfigured) as raised:
        app.replace(**{name: value})
    message = str(raised.value)
    assert message.startswith('setting %s %s' % (name, problem))
    assert '\n' not in message


def test_the_defaults_keep_payloads_in_sqs_up_to_its_limit(app):
    assert app.config.PAYLOAD_BUCKET == ''
    assert app.config.PAYLOAD_OFFLOAD_BYTES == app.config.SQS_TASK_SIZE_LIMIT == 1048576


def test_eager_mode_keeps_big_payloads_in_memory_not_in_s3():
    """Eager mode is the default app's (``MyTask.publish``): its settings are the global ones."""
    from kale import testing
    from tests import tasks
    data = os.urandom(BIG)
    with settings.override(PAYLOAD_BUCKET='never-reached'):
        assert testing.run_eagerly(tasks.EchoTask, None, data)['args'] == (data,)
