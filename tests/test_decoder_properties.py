"""Property tests for the decoder: whatever arrives, it either yields a verified
message or raises DecodeError, and it never deserializes anything unverified."""
import base64

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from kale import codec
from kale.codec import serialize
from kale.conf import settings as kale_settings
from kale.exceptions import DecodeError
from kale.message import Message

PROPERTY_SETTINGS = hypothesis_settings(max_examples=400, deadline=None,
                                        suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def deserialized(monkeypatch):
    """Bodies whose payload reached the deserializer."""
    seen = []
    real = serialize._loads

    def spy(raw, serializer):
        seen.append(raw)
        return real(raw, serializer)

    monkeypatch.setattr(serialize, '_loads', spy)
    return seen


def is_verified(body):
    try:
        codec.get_codec().steps[-1].verify(body)
    except DecodeError:
        return False
    return True


def check(body, deserialized):
    before = len(deserialized)
    try:
        message = codec.decode(body)
    except DecodeError as exc:
        assert exc.reason in DecodeError.REASONS
        message = None
    if len(deserialized) > before:
        assert is_verified(body), 'deserialized a body that does not verify'
    if message is not None:
        assert is_verified(body)
    return message


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8),
                                                                       children, max_size=4),
    max_leaves=12)


def valid_body(args, serializer):
    message = Message('id-1', 'tests.tasks.EchoTask', tuple(args), {'k': args[:1]}, retry_num=1)
    with kale_settings.override(SERIALIZER=serializer):
        return codec.encode(message)


@PROPERTY_SETTINGS
@given(data=st.binary(max_size=600))
def test_arbitrary_bytes_never_escape_as_anything_but_decode_error(data, deserialized):
    assert check(data.decode('latin-1'), deserialized) is None
    assert check(base64.b64encode(data).decode(), deserialized) is None


@PROPERTY_SETTINGS
@given(text=st.text(max_size=300), flags=st.sampled_from(['p-', 'pz', 'j-', 'jz', 'xx', '']))
def test_forged_kale_headers_are_refused(text, flags, deserialized):
    assert check('kale1:%s:%s' % (flags, text), deserialized) is None
    assert check('kale1:%s:%s:%s' % (flags, 'A' * 43, text), deserialized) is None


@PROPERTY_SETTINGS
@given(args=st.lists(json_values, max_size=5), serializer=st.sampled_from(['pickle', 'json']),
       data=st.data())
def test_mutated_valid_bodies_decode_verified_or_fail_cleanly(args, serializer, data, deserialized):
    body = valid_body(args, serializer)
    kind = data.draw(st.sampled_from(['flip', 'insert', 'delete', 'truncate', 'append']))
    at = data.draw(st.integers(0, len(body) - 1))
    char = data.draw(st.characters(max_codepoint=0x2FF))
    mutated = {'flip': body[:at] + char + body[at + 1:], 'insert': body[:at] + char + body[at:],
               'delete': body[:at] + body[at + 1:], 'truncate': body[:at],
               'append': body + char}[kind]
    message = check(mutated, deserialized)
    if message is not None:
        assert mutated == body or message == codec.decode(body)


@PROPERTY_SETTINGS
@given(args=st.lists(json_values, max_size=5), serializer=st.sampled_from(['pickle', 'json']))
def test_valid_bodies_round_trip(args, serializer, deserialized):
    message = check(valid_body(args, serializer), deserialized)
    assert message is not None
    assert list(message.args) == list(args)
