"""The codec: round trips, compression, signatures, key rotation, size limits."""
import base64
import dataclasses
import os
import pickle
import zlib

import pytest

from kale import codec
from kale.app import default_app
from kale.codec import serialize
from kale.codec.keys import key_id, signing_keys
from kale.codec.sign import signature
from kale.conf import settings
from kale.exceptions import (
    DecodeError,
    ImproperlyConfigured,
    MessageTooLargeError,
    SerializationError,
)
from kale.message import Message
from tests.support.hostile import (
    OTHER_KEY,
    CreatesFileWhenUnpickled,
    envelope_headers,
    signed_body,
)

QUEUE = 'tq-default'


def encode(app, message, serializer=None, queue=QUEUE):
    """The body ``app`` makes for ``message``, with SERIALIZER set to ``serializer`` if given."""
    if serializer is not None:
        app = app.replace(SERIALIZER=serializer, ACCEPT_SERIALIZERS=('pickle', 'json'))
    return app.codec.encode(message, queue).body


def decode(app, body, queue=QUEUE, **kwargs):
    """``body`` decoded by ``app``, accepting both serializers."""
    return app.replace(ACCEPT_SERIALIZERS=('pickle', 'json')).codec.decode(body, queue, **kwargs)


def to_outgoing(app, message, delay_sec=0):
    return app.codec.to_outgoing(message, QUEUE, delay_sec)


def current_key(app):
    """The signing key ``app`` signs with, as bytes."""
    return signing_keys(config=app.config).current


def hostile_headers(app, queue=QUEUE, **changes):
    """Envelope headers of a body for ``queue`` issued now, naming ``app``'s current key."""
    return envelope_headers(queue, **{'k': key_id(current_key(app)), **changes})


def hostile_body(app, data, headers=None, key=None):
    """A kale2 body with any headers and data, signed with ``app``'s current key
    unless ``key`` is given."""
    headers = headers if headers is not None else hostile_headers(app)
    return signed_body(data, headers, key=key or current_key(app))


def legacy_body(app, flags, data):
    """A body of the earlier kale1 format, signed with ``app``'s current key."""
    header = ('kale1:%s:' % flags).encode()
    return (header + signature(current_key(app), header + data) + b':' + data).decode()


#: One publish time for every message of a test run (whole seconds, as on the
#: wire, and recent enough for the replay window): two messages made a second
#: apart still compare equal.
PUBLISHED_AT = float(int(__import__('time').time()))


def make_message(**changes):
    fields = dict(task_id='abc123', task_name='tests.tasks.EchoTask', args=(1, 'two', [3]),
                  kwargs={'k': {'nested': True}}, app_data={'env': 'test'}, retry_num=2,
                  failure_num=1, sent_at=1700000000.5, publisher='host[1]',
                  published_at=PUBLISHED_AT)
    fields.update(changes)
    return Message(**fields)


@pytest.mark.parametrize('serializer', ['pickle', 'json'])
def test_round_trip(app, serializer):
    original = make_message()
    decoded = decode(app, encode(app, original, serializer))
    assert decoded == original


def test_pickle_round_trips_python_objects(app):
    original = make_message(args=({1, 2}, b'bytes', 3 + 4j))
    assert decode(app, encode(app, original, 'pickle')).args == ({1, 2}, b'bytes', 3 + 4j)


def test_plain_json_bodies_are_readable_text(app):
    body = encode(app, make_message(), 'json')
    assert body.startswith('kale2:')
    assert 'd=t' in body.split(':')[1]
    assert '"task":"tests.tasks.EchoTask"' in body


def test_the_envelope_names_task_time_queue_and_key(app):
    message = make_message()
    frame = app.codec.open(encode(app, message), QUEUE)
    assert (frame.task_id, frame.task_name, frame.published_at) == \
        ('abc123', 'tests.tasks.EchoTask', message.published_at)
    assert frame.headers['q'] == QUEUE
    assert frame.headers['k'] == key_id(app.config.MESSAGE_SIGNING_KEY.encode())


def test_large_bodies_are_compressed_when_smaller(app):
    message = make_message(args=('x' * 50000,))
    for serializer in ('pickle', 'json'):
        body = encode(app, message, serializer)
        assert 'c=z' in body.split(':')[1]
        assert len(body) < 5000
        assert decode(app, body) == message


def test_incompressible_bodies_are_left_alone(app):
    message = make_message(args=(os.urandom(3000),))
    body = encode(app, message, 'pickle')
    assert 'c=-' in body.split(':')[1]
    assert decode(app, body) == message


def test_flipping_one_byte_breaks_the_signature(app):
    body = encode(app, make_message(), 'json')
    position = body.index('two')
    tampered = body[:position] + 'twO' + body[position + 3:]
    with pytest.raises(DecodeError) as info:
        decode(app, tampered)
    assert info.value.reason == DecodeError.BAD_SIGNATURE
    assert info.value.body == tampered


@pytest.mark.parametrize('position', [0, 8, 20, -1])
def test_any_changed_character_is_refused(app, position):
    body = encode(app, make_message(), 'pickle')
    index = position % len(body)
    changed = body[:index] + ('A' if body[index] != 'A' else 'B') + body[index + 1:]
    with pytest.raises(DecodeError) as info:
        decode(app, changed)
    assert info.value.reason in (DecodeError.BAD_SIGNATURE, DecodeError.NOT_KALE)


def test_changing_a_header_breaks_the_signature(app):
    body = encode(app, make_message(), 'json')
    for old, new in [('s=j', 's=p'), ('q=' + QUEUE, 'q=tq-other'), ('u=0', 'u=1')]:
        with pytest.raises(DecodeError, match='bad_signature'):
            decode(app, body.replace(old, new, 1), queue='tq-other' if 'other' in new else QUEUE)


def test_body_signed_with_another_key_is_refused(app):
    body = encode(app.replace(MESSAGE_SIGNING_KEY=OTHER_KEY), make_message())
    with pytest.raises(DecodeError) as info:
        decode(app, body)
    assert info.value.reason == DecodeError.BAD_SIGNATURE


def test_a_body_naming_the_current_key_but_signed_with_another_is_refused(app):
    body = hostile_body(app, b'data', hostile_headers(app), key=OTHER_KEY.encode())
    with pytest.raises(DecodeError, match='bad_signature'):
        decode(app, body)


def test_unsigned_pickle_is_never_unpickled(app, tmp_path):
    marker = tmp_path / 'unpickled'
    evil = pickle.dumps(CreatesFileWhenUnpickled(str(marker)))
    encoded = base64.b64encode(evil).decode()
    bodies = [
        evil.decode('latin-1'),                                        # raw pickle
        encoded,                                                       # base64 pickle
        'kale2:s=p;c=-;d=b;k=00000000:%s:%s' % ('A' * 43, encoded),    # forged header
        'kale2:s=p;c=-;d=b::%s' % encoded,                             # empty signature
        'kale1:p-:%s:%s' % ('A' * 43, encoded),                        # forged old format
    ]
    # The payload is real: unpickling it does create the file.
    pickle.loads(evil)
    assert marker.exists()
    marker.unlink()
    for body in bodies:
        with pytest.raises(DecodeError) as info:
            decode(app, body)
        assert info.value.reason in (DecodeError.NOT_KALE, DecodeError.BAD_SIGNATURE)
    assert not marker.exists()


def test_body_without_the_header_is_not_a_kale_message(app):
    for body in ['', 'hello', '{"id": 1}', 'kale3:p-:sig:data', 'kale2:only-two']:
        with pytest.raises(DecodeError) as info:
            decode(app, body)
        assert info.value.reason == DecodeError.NOT_KALE


@pytest.mark.parametrize('changes, data', [
    ({}, b'!!!not base64!!!'),
    ({'c': 'z'}, base64.b64encode(b'not zlib')),
    ({'s': 'j', 'd': 't'}, b'{"no": "fields"}'),
    ({'s': 'x'}, b'ZGF0YQ=='),
    ({'c': 'q'}, b'ZGF0YQ=='),
    ({'s': 'j', 'd': 't'}, b'not json'),
    ({}, base64.b64encode(b'not a pickle')),
    ({'s': 'j', 'd': 't'}, b'[1, 2]'),
    ({'s': 'j', 'c': 'z'}, base64.b64encode(zlib.compress(b'{"id": 1}')[:-3])),
    ({'s': 'j', 'd': 't'}, b'{"id": "other", "task": "tests.tasks.EchoTask", "args": [], '
                           b'"kwargs": {}}'),
    ({'e': 'feedbeef'}, base64.b64encode(b'x' * 40)),
])
def test_signed_garbage_is_a_corrupt_body(app, changes, data):
    headers = hostile_headers(app, **changes)
    both = app.replace(ACCEPT_SERIALIZERS=('pickle', 'json', ))
    with pytest.raises(DecodeError) as info:
        both.codec.decode(hostile_body(app, data, headers), QUEUE)
    assert info.value.reason in (DecodeError.CORRUPT, DecodeError.SERIALIZER_NOT_ACCEPTED)


@pytest.mark.parametrize('extra', ['junk', 'i=again', '=empty-name'])
def test_headers_that_do_not_parse_are_a_corrupt_body(app, extra):
    tag, head, _, data = hostile_body(app, b'ZGF0YQ==', hostile_headers(app)).split(':', 3)
    head += ';' + extra                     # signed as it stands: only the key holder can
    signed = ('%s:%s:%s' % (tag, head, data)).encode()
    sig = signature(app.config.MESSAGE_SIGNING_KEY.encode(), signed).decode()
    with pytest.raises(DecodeError, match='corrupt_body: envelope headers .* do not parse'):
        decode(app, '%s:%s:%s:%s' % (tag, head, sig, data))


def test_decoding_never_resolves_the_task(app):
    body = encode(app, make_message(task_name='tests.tasks.NoSuchTask'))
    assert decode(app, body).task_name == 'tests.tasks.NoSuchTask'


def test_key_rotation_old_key_still_verifies(app):
    old_body = encode(app.replace(MESSAGE_SIGNING_KEY=OTHER_KEY), make_message())
    current = app.config.MESSAGE_SIGNING_KEY
    rotating = app.replace(MESSAGE_SIGNING_OLD_KEYS=[OTHER_KEY])
    assert decode(rotating, old_body) == make_message()
    new_body = encode(rotating, make_message())
    rotated = app.replace(MESSAGE_SIGNING_KEY=OTHER_KEY, MESSAGE_SIGNING_OLD_KEYS=(current,))
    assert decode(rotated, new_body) == make_message()
    with pytest.raises(DecodeError, match='bad_signature'):
        decode(app, old_body)


def test_no_signing_key_says_how_to_set_one(app):
    unsigned = app.replace(MESSAGE_SIGNING_KEY='')
    with pytest.raises(ImproperlyConfigured,
                       match='MESSAGE_SIGNING_KEY is not set.*secrets.token_hex'):
        encode(unsigned, make_message())
    with pytest.raises(ImproperlyConfigured, match='MESSAGE_SIGNING_KEY is not set'):
        decode(unsigned, 'kale2:x:y:z')


def test_short_signing_key_is_refused(app):
    short = app.replace(MESSAGE_SIGNING_KEY='short')
    with pytest.raises(ImproperlyConfigured, match='MESSAGE_SIGNING_KEY is too short'):
        encode(short, make_message())


def test_size_limit_names_the_task_and_both_sizes(app):
    message = make_message(args=(os.urandom(2000),))
    with pytest.raises(MessageTooLargeError) as info:
        to_outgoing(app.replace(SQS_TASK_SIZE_LIMIT=1024), message)
    text = str(info.value)
    assert 'tests.tasks.EchoTask' in text
    size = to_outgoing(app, message).size()
    assert '%d bytes, over SQS_TASK_SIZE_LIMIT of 1024 bytes' % size in text


def test_attributes_carry_id_name_and_counts(app):
    outgoing = to_outgoing(app, make_message(), delay_sec=7)
    assert outgoing.attributes == {'kale_task_id': 'abc123',
                                   'kale_task_name': 'tests.tasks.EchoTask',
                                   'kale_retry_num': 2, 'kale_failure_num': 1}
    assert outgoing.delay_sec == 7


def test_json_refuses_what_it_cannot_represent(app):
    with pytest.raises(SerializationError, match=r'task tests.tasks.EchoTask \(abc123\): '
                                                 'arguments cannot be serialized with json'):
        encode(app, make_message(args=(object(),)), 'json')


def test_pickle_refuses_what_it_cannot_pickle(app):
    with pytest.raises(SerializationError, match='cannot be serialized with pickle'):
        encode(app, make_message(args=(lambda: None,)), 'pickle')


def test_unknown_serializer_setting_is_a_clear_error(app):
    with pytest.raises(ImproperlyConfigured, match="setting SERIALIZER must be one of 'pickle', "
                                                   "'json', got 'yaml'"):
        app.replace(SERIALIZER='yaml')


def test_decompression_is_bounded(app):
    bomb = base64.b64encode(zlib.compress(b'\0' * (1024 * 1024 + 10)))
    body = hostile_body(app, bomb, hostile_headers(app, compression='z'))
    with pytest.raises(DecodeError, match='corrupt_body: decompresses to more than 1048576 '
                                          r'bytes \(MAX_DECOMPRESSED_BYTES\)'):
        decode(app.replace(MAX_DECOMPRESSED_BYTES=1024 * 1024), body)


def test_publishing_refuses_a_payload_no_worker_would_decompress(app):
    message = make_message(args=('x' * 5000,))
    with pytest.raises(MessageTooLargeError, match=r'task tests.tasks.EchoTask \(abc123\): '
                                                   r'serialized payload is \d+ bytes, over '
                                                   'MAX_DECOMPRESSED_BYTES of 4096'):
        encode(app.replace(MAX_DECOMPRESSED_BYTES=4096), message)


def test_next_attempt_counts_retries_and_failures_and_keeps_the_issue_time():
    message = make_message(published_at=1000.0)
    retry = message.next_attempt()
    assert (retry.task_id, retry.retry_num, retry.failure_num, retry.published_at) == \
        ('abc123', 3, 2, 1000.0)


def test_a_body_over_the_size_limit_is_refused_before_it_is_verified(app):
    body = encode(app, make_message(args=(os.urandom(3000),)))
    with pytest.raises(DecodeError) as info:
        decode(app.replace(SQS_TASK_SIZE_LIMIT=len(body) - 1), body)
    assert info.value.reason == DecodeError.TOO_LARGE
    assert 'over SQS_TASK_SIZE_LIMIT' in str(info.value)


def test_the_codec_is_built_once_per_configuration(app):
    first = app.codec
    assert app.codec is first
    assert app.codec is app.codec                   # an app on its own clock: its own, once
    as_json = app.replace(SERIALIZER='json')
    assert as_json.codec is not first
    assert 's=j' in as_json.codec.encode(make_message(), QUEUE).body.split(':')[1]


def test_the_module_level_functions_follow_the_default_apps_settings():
    # On the global settings on purpose: codec.encode, decode and to_outgoing
    # are the default app's, whose codec is rebuilt when its settings change.
    first = default_app().codec
    assert default_app().codec is first
    with settings.override(SERIALIZER='json', ACCEPT_SERIALIZERS=['json']):
        assert default_app().codec is not first
        body = codec.encode(make_message(), QUEUE)
        assert 's=j' in body.split(':')[1]
        assert codec.decode(body, QUEUE) == make_message()
        assert 's=j' in codec.to_outgoing(make_message(), QUEUE).body.split(':')[1]


def test_a_step_can_add_attributes_on_the_way_out(app):
    class Tag:
        name = 'tag'

        def encode(self, frame):
            frame.attributes['trace'] = 'abc'

        def decode(self, frame):
            pass

    built = codec.build_codec(app.config)
    built.payload_steps.insert(0, Tag())
    outgoing = built.to_outgoing(make_message(), QUEUE)
    assert outgoing.attributes['trace'] == 'abc'
    assert built.decode(outgoing.body, QUEUE) == make_message()


def test_opening_a_body_does_not_decode_its_payload(app, monkeypatch):
    body = encode(app, make_message(args=('x' * 50000,)))
    touched = []
    monkeypatch.setattr(zlib, 'decompressobj', lambda *a: touched.append(a))
    monkeypatch.setattr(serialize, '_loads', lambda *a: touched.append(a))
    frame = app.codec.open(body, QUEUE)
    assert frame.task_name == 'tests.tasks.EchoTask'
    assert touched == []


# --- the replay window and the queue binding ---------------------------------------

def test_a_body_older_than_the_replay_window_is_expired(app):
    windowed = app.replace(MESSAGE_MAX_AGE_SEC=3600)
    fresh = encode(windowed, make_message(published_at=app.clock.time() - 3500))
    old = encode(windowed, make_message(published_at=app.clock.time() - 3700))
    assert decode(windowed, fresh).task_id == 'abc123'
    app.clock.advance(-200)                         # its clock, not the machine's, tells ages
    assert decode(windowed, old).task_id == 'abc123'
    app.clock.advance(200)
    with pytest.raises(DecodeError) as info:
        decode(windowed, old)
    assert info.value.reason == DecodeError.EXPIRED
    assert 'over MESSAGE_MAX_AGE_SEC of 3600' in str(info.value)


def test_the_default_window_is_fourteen_days_and_fifteen_minutes(app):
    assert app.config.MESSAGE_MAX_AGE_SEC == 14 * 24 * 3600 + 15 * 60
    day = 24 * 3600.0
    now = app.clock.time()                          # the app's codec tells ages by its clock
    assert decode(app, encode(app, make_message(published_at=now - 14 * day))).task_id == 'abc123'
    with pytest.raises(DecodeError, match='expired'):
        decode(app, encode(app, make_message(published_at=now - 14 * day - 16 * 60)))


def test_a_body_signed_for_one_queue_is_refused_on_another(app):
    body = encode(app, make_message(), queue='tq-payments')
    with pytest.raises(DecodeError) as info:
        decode(app, body, queue='tq-default')
    assert info.value.reason == DecodeError.WRONG_QUEUE
    assert "signed for queue 'tq-payments', received on 'tq-default'" in str(info.value)
    assert decode(app, body, queue='tq-payments').task_id == 'abc123'


def test_resealing_signs_with_the_current_key_and_keeps_time_and_queue(app):
    message = make_message(published_at=1700000000.0)
    old_body = encode(app.replace(MESSAGE_SIGNING_KEY=OTHER_KEY, MESSAGE_MAX_AGE_SEC=10 ** 9), message)
    built = app.replace(MESSAGE_SIGNING_OLD_KEYS=[OTHER_KEY], MESSAGE_MAX_AGE_SEC=10 ** 9).codec
    resealed = built.reseal(built.open(old_body, QUEUE), u='2')
    again = decode(app.replace(MESSAGE_MAX_AGE_SEC=10 ** 9), resealed)    # the old key is no longer needed
    assert again == dataclasses.replace(message, unsettled=2)


# --- what a worker accepts ---------------------------------------------------------

def test_a_json_worker_never_unpickles(app, monkeypatch):
    body = encode(app, make_message(), 'pickle')
    loaded = []
    monkeypatch.setattr(serialize, '_loads', lambda *a: loaded.append(a))
    with pytest.raises(DecodeError) as info:
        app.replace(SERIALIZER='json').codec.decode(body, QUEUE)
    assert info.value.reason == DecodeError.SERIALIZER_NOT_ACCEPTED
    assert loaded == []


def test_accept_serializers_defaults_to_the_serializer(app):
    body = encode(app, make_message(), 'json')
    pickling = app.replace(SERIALIZER='pickle')
    with pytest.raises(DecodeError, match='serializer_not_accepted'):
        pickling.codec.decode(body, QUEUE)
    accepting = pickling.replace(ACCEPT_SERIALIZERS=['pickle', 'json'])
    assert accepting.codec.decode(body, QUEUE).task_id == 'abc123'


def test_old_format_bodies_are_refused_unless_accepted(app):
    payload = make_message().to_payload()
    body = legacy_body(app, 'j-', serialize.SerializeStep('json')._dumps(payload))
    with pytest.raises(DecodeError) as info:
        decode(app, body)
    assert info.value.reason == DecodeError.NOT_KALE
    assert 'ACCEPT_LEGACY_MESSAGES' in str(info.value)
    legacy_app = app.replace(ACCEPT_LEGACY_MESSAGES=True, ACCEPT_SERIALIZERS=['json'])
    legacy = legacy_app.codec.decode(body, QUEUE)
    assert legacy.task_id == 'abc123' and legacy.published_at == payload['enqueued_at']


# --- encryption --------------------------------------------------------------------

SECRET = 'an-encryption-secret-of-32-chars!!'
OLD_SECRET = 'the-previous-encryption-secret-0123'


def test_encrypted_bodies_hide_every_argument(app):
    message = make_message(args=('card 4111-1111',), kwargs={'email': 'a@example.com'})
    encrypting = app.replace(MESSAGE_ENCRYPTION_KEY=SECRET, SERIALIZER='json',
                             ACCEPT_SERIALIZERS=['json'])
    outgoing = encrypting.codec.to_outgoing(message, QUEUE)
    assert encrypting.codec.decode(outgoing.body, QUEUE) == message
    wire = outgoing.body + repr(outgoing.attributes)
    for secret in ('4111', 'example.com', 'email', 'card'):
        assert secret not in wire
        assert secret.encode() not in base64.b64decode(outgoing.body.split(':')[3])


def test_each_body_gets_a_fresh_nonce(app):
    encrypting = app.replace(MESSAGE_ENCRYPTION_KEY=SECRET)
    first, second = encode(encrypting, make_message()), encode(encrypting, make_message())
    assert first.split(':')[3] != second.split(':')[3]


def test_an_encrypted_body_needs_its_key(app):
    body = encode(app.replace(MESSAGE_ENCRYPTION_KEY=SECRET), make_message())
    with pytest.raises(DecodeError, match="corrupt_body: encrypted with key '[0-9a-f]{8}', "
                                          'which is neither MESSAGE_ENCRYPTION_KEY nor an old key'):
        decode(app, body)
    with pytest.raises(DecodeError, match='corrupt_body'):
        decode(app.replace(MESSAGE_ENCRYPTION_KEY=OLD_SECRET), body)


def test_encryption_key_rotation(app):
    old_body = encode(app.replace(MESSAGE_ENCRYPTION_KEY=OLD_SECRET), make_message())
    rotating = app.replace(MESSAGE_ENCRYPTION_KEY=SECRET, MESSAGE_ENCRYPTION_OLD_KEYS=[OLD_SECRET])
    assert decode(rotating, old_body) == make_message()         # queued bodies drain
    new_body = encode(rotating, make_message())
    rotated = app.replace(MESSAGE_ENCRYPTION_KEY=SECRET)
    assert decode(rotated, new_body) == make_message()          # the old key can go
    with pytest.raises(DecodeError):
        decode(rotated, old_body)


def test_encryption_can_be_turned_off_while_queued_bodies_drain(app):
    encrypted = encode(app.replace(MESSAGE_ENCRYPTION_KEY=SECRET), make_message())
    draining = app.replace(MESSAGE_ENCRYPTION_OLD_KEYS=[SECRET])
    assert decode(draining, encrypted) == make_message()
    assert 'e=' not in encode(draining, make_message()).split(':')[1]


def test_a_short_encryption_key_is_refused(app):
    short = app.replace(MESSAGE_ENCRYPTION_KEY='short')
    with pytest.raises(ImproperlyConfigured, match='MESSAGE_ENCRYPTION_KEY is too short'):
        short.codec


def test_tampered_ciphertext_fails_the_signature_before_decryption(app):
    encrypting = app.replace(MESSAGE_ENCRYPTION_KEY=SECRET)
    body = encode(encrypting, make_message())
    head, data = body.rsplit(':', 1)
    raw = bytearray(base64.b64decode(data))
    raw[-1] ^= 1
    with pytest.raises(DecodeError, match='bad_signature'):
        encrypting.codec.decode(head + ':' + base64.b64encode(bytes(raw)).decode(), QUEUE)


@pytest.mark.parametrize('text', ['a', 'a=1;b', 'a=1=2', 'a=1;a=2', '=1', 'a=1;;b=2', 'a=1;'])
def test_envelope_headers_that_do_not_parse_are_refused(text):
    from kale.codec.sign import parse_headers
    with pytest.raises(DecodeError, match='do not parse'):
        parse_headers(text)


def test_envelope_headers_parse_into_names_and_decoded_values():
    from kale.codec.sign import parse_headers
    assert parse_headers('') == {}
    assert parse_headers('k=ab;e=;q=a%3Bb%3Dc') == {'k': 'ab', 'e': '', 'q': 'a;b=c'}
