"""The codec: round trips, compression, signatures, key rotation, size limits."""
import base64
import os
import pickle
import zlib

import pytest

from kale import codec
from kale.codec.compress import MAX_DECOMPRESSED_BYTES
from kale.conf import settings
from kale.exceptions import (
    DecodeError,
    ImproperlyConfigured,
    MessageTooLargeError,
    SerializationError,
)
from kale.message import Message
from tests.support.hostile import OTHER_KEY, CreatesFileWhenUnpickled, signed_body

decode = codec.decode
to_outgoing = codec.to_outgoing


def encode(message, serializer=None):
    """The body for ``message``, with SERIALIZER set to ``serializer`` if given."""
    if serializer is None:
        return codec.encode(message)
    with settings.override(SERIALIZER=serializer):
        return codec.encode(message)


def make_message(**changes):
    fields = dict(task_id='abc123', task_name='tests.tasks.EchoTask', args=(1, 'two', [3]),
                  kwargs={'k': {'nested': True}}, app_data={'env': 'test'}, retry_num=2,
                  failure_num=1, enqueued_at=1700000000.5, publisher='host[1]')
    fields.update(changes)
    return Message(**fields)


@pytest.mark.parametrize('serializer', ['pickle', 'json'])
def test_round_trip(serializer):
    original = make_message()
    decoded = decode(encode(original, serializer))
    assert decoded == original


def test_pickle_round_trips_python_objects():
    original = make_message(args=({1, 2}, b'bytes', 3 + 4j))
    assert decode(encode(original, 'pickle')).args == ({1, 2}, b'bytes', 3 + 4j)


def test_plain_json_bodies_are_readable_text():
    body = encode(make_message(), 'json')
    assert body.startswith('kale1:j-:')
    assert '"task":"tests.tasks.EchoTask"' in body


def test_large_bodies_are_compressed_when_smaller():
    message = make_message(args=('x' * 50000,))
    for serializer in ('pickle', 'json'):
        body = encode(message, serializer)
        assert body.split(':')[1].endswith('z')
        assert len(body) < 5000
        assert decode(body) == message


def test_incompressible_bodies_are_left_alone():
    message = make_message(args=(os.urandom(3000),))
    body = encode(message, 'pickle')
    assert body.split(':')[1] == 'p-'
    assert decode(body) == message


def test_flipping_one_byte_breaks_the_signature():
    body = encode(make_message(), 'json')
    position = body.index('two')
    tampered = body[:position] + 'twO' + body[position + 3:]
    with pytest.raises(DecodeError) as info:
        decode(tampered)
    assert info.value.reason == DecodeError.BAD_SIGNATURE
    assert info.value.body == tampered


@pytest.mark.parametrize('position', [0, 8, 20, -1])
def test_any_changed_character_is_refused(position):
    body = encode(make_message(), 'pickle')
    index = position % len(body)
    changed = body[:index] + ('A' if body[index] != 'A' else 'B') + body[index + 1:]
    with pytest.raises(DecodeError) as info:
        decode(changed)
    assert info.value.reason in (DecodeError.BAD_SIGNATURE, DecodeError.NOT_KALE)


def test_changing_the_flags_breaks_the_signature():
    body = encode(make_message(), 'json')
    with pytest.raises(DecodeError, match='bad_signature'):
        decode(body.replace('kale1:j-:', 'kale1:p-:', 1))


def test_body_signed_with_another_key_is_refused():
    with settings.override(MESSAGE_SIGNING_KEY=OTHER_KEY):
        body = encode(make_message())
    with pytest.raises(DecodeError) as info:
        decode(body)
    assert info.value.reason == DecodeError.BAD_SIGNATURE


def test_unsigned_pickle_is_never_unpickled(tmp_path):
    marker = tmp_path / 'unpickled'
    evil = pickle.dumps(CreatesFileWhenUnpickled(str(marker)))
    bodies = [
        evil.decode('latin-1'),                                     # raw pickle
        base64.b64encode(evil).decode(),                            # base64 pickle
        'kale1:p-:%s:%s' % ('A' * 43, base64.b64encode(evil).decode()),   # forged header
        'kale1:p-::%s' % base64.b64encode(evil).decode(),           # empty signature
    ]
    # The payload is real: unpickling it does create the file.
    pickle.loads(evil)
    assert marker.exists()
    marker.unlink()
    for body in bodies:
        with pytest.raises(DecodeError) as info:
            decode(body)
        assert info.value.reason in (DecodeError.NOT_KALE, DecodeError.BAD_SIGNATURE)
    assert not marker.exists()


def test_body_without_the_header_is_not_a_kale_message():
    for body in ['', 'hello', '{"id": 1}', 'kale2:p-:sig:data', 'kale1:only-two']:
        with pytest.raises(DecodeError) as info:
            decode(body)
        assert info.value.reason == DecodeError.NOT_KALE


@pytest.mark.parametrize('flags, data', [
    ('p-', b'!!!not base64!!!'), ('pz', base64.b64encode(b'not zlib')),
    ('j-', b'{"no": "fields"}'), ('xx', b'data'), ('p', b'data'), ('pq', b'ZGF0YQ=='),
    ('j-', b'not json'), ('p-', base64.b64encode(b'not a pickle')),
    ('j-', b'[1, 2]'), ('jz', base64.b64encode(zlib.compress(b'{"id": 1}')[:-3])),
])
def test_signed_garbage_is_a_corrupt_body(flags, data):
    with pytest.raises(DecodeError) as info:
        decode(signed_body(flags, data))
    assert info.value.reason == DecodeError.CORRUPT


def test_decoding_never_resolves_the_task():
    body = encode(make_message(task_name='tests.tasks.NoSuchTask'))
    assert decode(body).task_name == 'tests.tasks.NoSuchTask'


def test_key_rotation_old_key_still_verifies():
    with settings.override(MESSAGE_SIGNING_KEY=OTHER_KEY):
        old_body = encode(make_message())
    current = settings.MESSAGE_SIGNING_KEY
    with settings.override(MESSAGE_SIGNING_OLD_KEYS=[OTHER_KEY]):
        assert decode(old_body) == make_message()
        new_body = encode(make_message())
    with settings.override(MESSAGE_SIGNING_KEY=OTHER_KEY, MESSAGE_SIGNING_OLD_KEYS=(current,)):
        assert decode(new_body) == make_message()
    with pytest.raises(DecodeError, match='bad_signature'):
        decode(old_body)


def test_no_signing_key_says_how_to_set_one():
    with settings.override(MESSAGE_SIGNING_KEY=''):
        with pytest.raises(ImproperlyConfigured, match='MESSAGE_SIGNING_KEY is not set.*secrets.token_hex'):
            encode(make_message())
        with pytest.raises(ImproperlyConfigured, match='MESSAGE_SIGNING_KEY is not set'):
            decode('kale1:p-:x:y')


def test_short_signing_key_is_refused():
    with settings.override(MESSAGE_SIGNING_KEY='short'):
        with pytest.raises(ImproperlyConfigured, match='MESSAGE_SIGNING_KEY is too short'):
            encode(make_message())


def test_size_limit_names_the_task_and_both_sizes():
    message = make_message(args=(os.urandom(2000),))
    with settings.override(SQS_TASK_SIZE_LIMIT=1024):
        with pytest.raises(MessageTooLargeError) as info:
            to_outgoing(message)
    text = str(info.value)
    assert 'tests.tasks.EchoTask' in text
    size = len(to_outgoing(message).body) + sum(
        len(k) + len('Number' if isinstance(v, int) else 'String') + len(str(v))
        for k, v in message.attributes().items())
    assert '%d bytes, over SQS_TASK_SIZE_LIMIT of 1024 bytes' % size in text


def test_attributes_carry_id_name_and_counts():
    outgoing = to_outgoing(make_message(), delay_sec=7)
    assert outgoing.attributes == {'kale_task_id': 'abc123', 'kale_task_name': 'tests.tasks.EchoTask',
                                   'kale_retry_num': 2, 'kale_failure_num': 1}
    assert outgoing.delay_sec == 7


def test_json_refuses_what_it_cannot_represent():
    with pytest.raises(SerializationError, match=r'task tests.tasks.EchoTask \(abc123\): arguments cannot be '
                                                 'serialized with json'):
        encode(make_message(args=(object(),)), 'json')


def test_pickle_refuses_what_it_cannot_pickle():
    with pytest.raises(SerializationError, match='cannot be serialized with pickle'):
        encode(make_message(args=(lambda: None,)), 'pickle')


def test_unknown_serializer_setting_is_a_clear_error():
    with pytest.raises(ImproperlyConfigured, match="setting SERIALIZER must be one of 'pickle', "
                                                   "'json', got 'yaml'"):
        with settings.override(SERIALIZER='yaml'):
            pass


def test_decompression_is_bounded():
    bomb = base64.b64encode(zlib.compress(b'\0' * (MAX_DECOMPRESSED_BYTES + 10)))
    with pytest.raises(DecodeError, match='corrupt_body: decompresses to more than'):
        decode(signed_body('pz', bomb))


def test_next_attempt_counts_retries_and_failures():
    retry = make_message().next_attempt()
    assert (retry.task_id, retry.retry_num, retry.failure_num) == ('abc123', 3, 2)


def test_a_body_over_the_size_limit_is_refused_before_it_is_verified():
    body = encode(make_message(args=(os.urandom(3000),)))
    with settings.override(SQS_TASK_SIZE_LIMIT=len(body) - 1):
        with pytest.raises(DecodeError) as info:
            decode(body)
    assert info.value.reason == DecodeError.TOO_LARGE
    assert 'over SQS_TASK_SIZE_LIMIT' in str(info.value)


def test_the_codec_is_built_once_per_settings_generation():
    first = codec.get_codec()
    assert codec.get_codec() is first
    with settings.override(SERIALIZER='json'):
        assert codec.get_codec() is not first
        assert codec.encode(make_message()).startswith('kale1:j-:')


def test_a_step_can_add_attributes_on_the_way_out():
    class Tag:
        name = 'tag'

        def encode(self, frame):
            frame.attributes['trace'] = 'abc'

        def decode(self, frame):
            pass

    built = codec.build_codec()
    built.steps.insert(0, Tag())
    outgoing = built.to_outgoing(make_message())
    assert outgoing.attributes['trace'] == 'abc'
    assert built.decode(outgoing.body) == make_message()
