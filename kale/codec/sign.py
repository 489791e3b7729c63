"""The signing step: the envelope ``kale2:<headers>:<signature>:<data>``
around the data, and its HMAC-SHA256, checked first on the way in
(docs/explanation/internals-transport.md, "The signed envelope").
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from typing import Any
from urllib.parse import quote, unquote

from kale.codec.keys import KeyRing, signing_keys
from kale.codec.pipeline import COMPRESSION, ENCODING, SERIALIZER, SIGNING_KEY, Frame
from kale.config import Config
from kale.exceptions import DecodeError

FORMAT_TAG = 'kale2'
LEGACY_TAG = 'kale1'
TEXT, BASE64 = 't', 'b'


def signature(key: bytes, signed: bytes) -> bytes:
    """base64url(HMAC-SHA256(key, signed)), unpadded."""
    return base64.urlsafe_b64encode(hmac.new(key, signed, hashlib.sha256).digest()).rstrip(b'=')


#: A value percent-encoding leaves as it is (the characters ``quote`` never
#: escapes): most headers, which then skip the encoder (a tenth of publishing's CPU).
_PLAIN = re.compile(r'[A-Za-z0-9_.~-]*')


def render_headers(headers: dict[str, str]) -> str:
    plain = _PLAIN.fullmatch
    return ';'.join('%s=%s' % (name, value if plain(value) else quote(value, safe=''))
                    for name, value in headers.items())


def parse_headers(text: str) -> dict[str, str]:
    """Headers of a verified envelope; DecodeError when they do not parse."""
    if not text:
        return {}
    # Names and values alternate once ';' is read as '=' (values are
    # percent-encoded, so neither holds either character): a pair without
    # '=', with two, or a repeated name leaves the count uneven.
    items = text.replace(';', '=').split('=')
    pairs = iter(items)
    headers = dict(zip(pairs, pairs, strict=False))    # an odd one out is caught below
    if len(items) != 2 * len(headers) or '' in headers:
        raise DecodeError(DecodeError.CORRUPT, 'envelope headers %r do not parse' % (text,))
    if '%' in text:
        headers = {name: unquote(value, errors='strict') if '%' in value else value
                   for name, value in headers.items()}
    return headers


class SignStep:
    """Wraps the data in the signed envelope, and verifies it on the way in."""

    name = 'sign'

    def __init__(self, keys: KeyRing, size_limit: int, accept_legacy: bool = False):
        self.keys = keys
        self.size_limit = size_limit
        self.accept_legacy = accept_legacy
        # HMAC states with each key already absorbed: a message costs a copy.
        self._macs = {kid: hmac.new(key, digestmod=hashlib.sha256) for kid, key in keys.accepted.items()}
        self._current_id = keys.current_id

    def _signature(self, kid: str, signed: bytes) -> bytes:
        mac = self._macs[kid].copy()
        mac.update(signed)
        return base64.urlsafe_b64encode(mac.digest()).rstrip(b'=')

    @classmethod
    def from_config(cls, config: Config) -> 'SignStep':
        return cls(signing_keys(config=config), config.SQS_TASK_SIZE_LIMIT,
                   bool(config.ACCEPT_LEGACY_MESSAGES))

    def encode(self, frame: Frame) -> None:
        # The key id comes first, so a worker finds it without parsing the rest.
        headers = {SIGNING_KEY: self._current_id}
        headers.update((name, value) for name, value in frame.headers.items() if name != SIGNING_KEY)
        headers[ENCODING] = TEXT if frame.text else BASE64
        frame.headers = headers
        data = frame.data if frame.text else base64.b64encode(frame.data)
        header = ('%s:%s:' % (FORMAT_TAG, render_headers(headers))).encode('ascii')
        frame.body = (header + self._signature(self._current_id, header + data) + b':' + data).decode('ascii')

    def decode(self, frame: Frame) -> None:
        tag, headers, data = self.verify(frame.body)
        if tag == LEGACY_TAG:
            if len(headers) != 2:
                raise DecodeError(DecodeError.CORRUPT, 'unknown format flags %r' % (headers,))
            frame.legacy = True
            frame.headers = {SERIALIZER: headers[0], COMPRESSION: headers[1],
                             ENCODING: TEXT if headers == 'j-' else BASE64}
        else:
            frame.headers = parse_headers(headers)
        frame.text = frame.headers.get(ENCODING) == TEXT
        raw = data.encode('utf-8', 'surrogatepass')
        try:
            frame.data = raw if frame.text else base64.b64decode(raw, validate=True)
        except binascii.Error as exc:
            raise DecodeError(DecodeError.CORRUPT, 'base64: %s' % exc) from exc

    def verify(self, body: Any) -> tuple[str, str, str]:
        """Check the envelope and its signature; returns (tag, headers, data)
        as text. Nothing is decoded yet. DecodeError (``too_large``,
        ``not_kale_message``, ``bad_signature``) when the body is refused."""
        if not isinstance(body, str):
            raise DecodeError(DecodeError.NOT_KALE, 'body is %s, not text' % type(body).__name__)
        if len(body) > self.size_limit:       # no publisher made it: refuse before hashing it
            raise DecodeError(DecodeError.TOO_LARGE, 'body of %d characters is over '
                              'SQS_TASK_SIZE_LIMIT of %d bytes' % (len(body), self.size_limit))
        parts = body.split(':', 3)
        if len(parts) != 4 or parts[0] not in (FORMAT_TAG, LEGACY_TAG):
            raise DecodeError(DecodeError.NOT_KALE, 'body does not start with a %s header' % FORMAT_TAG)
        tag, headers, given, data = parts
        if tag == LEGACY_TAG and not self.accept_legacy:
            raise DecodeError(DecodeError.NOT_KALE, 'body is in the old %s format; set '
                              'ACCEPT_LEGACY_MESSAGES = True to drain such messages' % LEGACY_TAG)
        signed = ('%s:%s:%s' % (tag, headers, data)).encode('utf-8', 'surrogatepass')
        if not self._verified(tag, headers, given, signed):
            raise DecodeError(DecodeError.BAD_SIGNATURE,
                              'signature does not match MESSAGE_SIGNING_KEY or any old key')
        return tag, headers, data

    def _verified(self, tag: str, headers: str, given: str, signed: bytes) -> bool:
        given_bytes = given.encode('utf-8', 'surrogatepass')
        if tag != LEGACY_TAG:           # the envelope names its key first (k=<id>): only to pick it
            name, _, named = headers.partition(';')[0].partition('=')
            return name == SIGNING_KEY and named in self._macs and \
                hmac.compare_digest(self._signature(named, signed), given_bytes)
        matched = False
        for kid in self._macs:          # every key, so timing does not tell which
            matched |= hmac.compare_digest(self._signature(kid, signed), given_bytes)
        return matched
