"""Property tests for the decoder: whatever arrives, it either yields a verified
message or raises DecodeError, and nothing unverified is decrypted,
decompressed or deserialized."""
import base64
import zlib

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from kale.codec import serialize
from kale.exceptions import DecodeError
from kale.message import Message

#: The fixtures (an app, patched decoders) are made once per test and shared by
#: its examples: the app's codec keeps no state between messages.
PROPERTY_SETTINGS = hypothesis_settings(max_examples=100, deadline=None,
                                        suppress_health_check=[HealthCheck.function_scoped_fixture])
QUEUE = 'tq-default'
SECRET = 'an-encryption-secret-of-32-chars!!'


@pytest.fixture(params=['plain', 'encrypted'])
def keyed_app(request, app):
    """The app whose codec encodes and decodes: every property holds with and
    without encryption."""
    values = {'ACCEPT_SERIALIZERS': ('pickle', 'json')}
    if request.param == 'encrypted':
        values['MESSAGE_ENCRYPTION_KEY'] = SECRET
    return app.replace(**values)


@pytest.fixture
def touched(monkeypatch):
    """The data that reached a deserializer, a decompressor or a decryptor."""
    seen = []
    real_loads = serialize._loads
    real_decompressobj = zlib.decompressobj
    real_decrypt = serialize.EncryptStep.decode

    def loads(raw, serializer):
        seen.append(('loads', raw))
        return real_loads(raw, serializer)

    def decompressobj(*args):
        seen.append(('decompress', None))
        return real_decompressobj(*args)

    def decrypt(self, frame):
        if 'e' in frame.headers:
            seen.append(('decrypt', frame.data))
        return real_decrypt(self, frame)

    monkeypatch.setattr(serialize, '_loads', loads)
    monkeypatch.setattr(zlib, 'decompressobj', decompressobj)
    monkeypatch.setattr(serialize.EncryptStep, 'decode', decrypt)
    return seen


def is_verified(app, body):
    sign = app.codec.envelope_steps[-1]
    try:
        sign.verify(body)
    except DecodeError:
        return False
    return True


def check(app, body, touched):
    before = len(touched)
    try:
        message = app.codec.decode(body, QUEUE)
    except DecodeError as exc:
        assert exc.reason in DecodeError.REASONS
        message = None
    if len(touched) > before:
        assert is_verified(app, body), 'decoded data of a body that does not verify'
    if message is not None:
        assert is_verified(app, body)
    return message


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8),
                                                                       children, max_size=4),
    max_leaves=12)


def valid_body(app, args, serializer):
    message = Message('id-1', 'tests.tasks.EchoTask', tuple(args), {'k': args[:1]}, retry_num=1)
    return app.replace(SERIALIZER=serializer).codec.encode(message, QUEUE).body


@PROPERTY_SETTINGS
@given(data=st.binary(max_size=600))
def test_arbitrary_bytes_never_escape_as_anything_but_decode_error(data, keyed_app, touched):
    assert check(keyed_app, data.decode('latin-1'), touched) is None
    assert check(keyed_app, base64.b64encode(data).decode(), touched) is None


@PROPERTY_SETTINGS
@given(text=st.text(max_size=300),
       headers=st.sampled_from(['s=p;c=-;d=b', 's=j;c=z;d=b;e=00000000', 's=j;c=-;d=t', '', 'xx']),
       tag=st.sampled_from(['kale2', 'kale1']))
def test_forged_kale_headers_are_refused(text, headers, tag, keyed_app, touched):
    assert check(keyed_app, '%s:%s:%s' % (tag, headers, text), touched) is None
    assert check(keyed_app, '%s:%s:%s:%s' % (tag, headers, 'A' * 43, text), touched) is None


@PROPERTY_SETTINGS
@given(args=st.lists(json_values, max_size=5), serializer=st.sampled_from(['pickle', 'json']),
       data=st.data())
def test_mutated_valid_bodies_decode_verified_or_fail_cleanly(args, serializer, data, keyed_app,
                                                              touched):
    body = valid_body(keyed_app, args, serializer)
    kind = data.draw(st.sampled_from(['flip', 'insert', 'delete', 'truncate', 'append']))
    at = data.draw(st.integers(0, len(body) - 1))
    char = data.draw(st.characters(max_codepoint=0x2FF))
    mutated = {'flip': body[:at] + char + body[at + 1:], 'insert': body[:at] + char + body[at:],
               'delete': body[:at] + body[at + 1:], 'truncate': body[:at],
               'append': body + char}[kind]
    message = check(keyed_app, mutated, touched)
    if message is not None:
        assert mutated == body or message == keyed_app.codec.decode(body, QUEUE)


@PROPERTY_SETTINGS
@given(args=st.lists(json_values, max_size=5), serializer=st.sampled_from(['pickle', 'json']))
def test_valid_bodies_round_trip(args, serializer, keyed_app, touched):
    message = check(keyed_app, valid_body(keyed_app, args, serializer), touched)
    assert message is not None
    assert list(message.args) == list(args)


@PROPERTY_SETTINGS
@given(args=st.lists(json_values, max_size=5), queue=st.text(min_size=1, max_size=20))
def test_a_valid_body_is_refused_on_any_other_queue(args, queue, keyed_app, touched):
    body = valid_body(keyed_app, args, 'json')
    try:
        message = keyed_app.codec.decode(body, queue)
    except DecodeError as exc:
        assert queue != QUEUE and exc.reason == DecodeError.WRONG_QUEUE
    else:
        assert queue == QUEUE and list(message.args) == list(args)
