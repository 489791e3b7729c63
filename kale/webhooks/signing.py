"""The Standard Webhooks signature (https://www.standardwebhooks.com/), and
the body and ids of a delivery (docs/explanation/internals-records.md,
"Signing")."""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
from typing import Any

from kale.exceptions import WebhookError
from kale.store.record import iso

SECRET_PREFIX = 'whsec_'
#: Random bytes in a new secret (the specification asks for 24 to 64).
SECRET_BYTES = 32
SIGNATURE_VERSION = 'v1'


def new_secret() -> str:
    """A fresh secret: ``whsec_`` and the base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(os.urandom(SECRET_BYTES)).decode()


def secret_key(secret: str) -> bytes:
    """The HMAC key of a secret: the base64-decoded part after ``whsec_``."""
    encoded = secret[len(SECRET_PREFIX):] if secret.startswith(SECRET_PREFIX) else ''
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        key = b''
    if len(key) < 24:
        raise WebhookError('a webhook secret must be whsec_ followed by the base64 of 24 or '
                           'more bytes')
    return key


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header of a delivery."""
    signed = b'%s.%d.%s' % (message_id.encode(), timestamp, body)
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return '%s,%s' % (SIGNATURE_VERSION, base64.b64encode(digest).decode())


def message_id(webhook_id: str, event_id: str) -> str:
    """The ``webhook-id`` of the deliveries of ``event_id`` to ``webhook_id``:
    the same on every attempt, and on every fan-out of the same event."""
    digest = hashlib.sha256(('%s\0%s' % (webhook_id, event_id)).encode()).hexdigest()
    return 'msg_' + digest[:32]


def body(topic: str, event_id: str, event: Any, published_at: float) -> bytes:
    """The JSON body of a delivery (compact, UTF-8)."""
    return json.dumps({'type': topic, 'id': event_id, 'timestamp': iso(published_at),
                       'data': event}, separators=(',', ':'), ensure_ascii=False).encode()
