"""What the records database may hold of a task's data (values sealed at
rest, or dropped), and what it may make a worker do (stored inputs carry a
MAC a retry checks): docs/explanation/internals-store.md, "Sealing and
signing the records"."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from typing import Any, Mapping, Optional

from kale.codec.keys import KeyRing, encryption_keys, signing_keys
from kale.config import Config
from kale.exceptions import RecordConflictError
from kale.retry import short_reason

#: The JSON key of a sealed JSON value, and the prefix of a sealed text.
SEALED_KEY = 'kale_sealed'
SEALED_PREFIX = 'kale-sealed:'
VERSION = 'v1'
NONCE_BYTES = 12

#: Columns whose values are sealed (JSON ones, then text ones).
SEALED_JSON_COLUMNS = ('inputs', 'result')
SEALED_TEXT_COLUMNS = ('error_message', 'error_traceback', 'stderr')

#: Shown in place of a value sealed under a key this process does not have.
UNREADABLE = '(sealed with a key this process does not have)'


def _derived(key: bytes, purpose: bytes) -> bytes:
    return hmac.new(key, b'kale-records:' + purpose, hashlib.sha256).digest()


#: The version of what an inputs MAC covers, in front of its key id.
MAC_VERSION = 'm2'


def canonical(row: Mapping[str, Any]) -> bytes:
    """The bytes a record's inputs MAC covers: task id, task, queue, arguments, labels."""
    inputs = row.get('inputs') or {}
    return json.dumps([MAC_VERSION, row.get('id'), row.get('task'), row.get('queue'),
                       inputs.get('args'), inputs.get('kwargs'), row.get('labels') or {}],
                      sort_keys=True, separators=(',', ':'), ensure_ascii=True).encode()


class Sealer:
    """Seals and opens record values, and signs and checks stored inputs, with a config's keys."""

    def __init__(self, config: Config):
        self.mode = config.RECORDS_SENSITIVE_DATA
        signing = signing_keys(config=config)
        self._mac_keys = {kid: _derived(key, b'inputs') for kid, key in signing.accepted.items()}
        self._mac_id = signing.current_id
        self._retry_key = _derived(self._mac_keys[self._mac_id], b'retry')
        ring: Optional[KeyRing] = encryption_keys(config)
        self._ciphers: dict[str, Any] = {}
        self._seal_id = ''
        if ring is not None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
            self._ciphers = {kid: AESGCM(_derived(key, b'seal'))
                             for kid, key in ring.accepted.items()}
            self._seal_id = ring.current_id if ring.current is not None else ''

    @property
    def sealing(self) -> bool:
        """Whether new values are sealed."""
        return bool(self._seal_id) and self.mode == 'encrypt'

    @property
    def dropping(self) -> bool:
        return self.mode == 'drop'

    # --- inputs ------------------------------------------------------------------

    def sign_inputs(self, row: Mapping[str, Any]) -> Optional[dict[str, Any]]:
        """The row's inputs with their ``mac`` (when they are exact: only
        those can be retried)."""
        inputs = row.get('inputs')
        if inputs is None or not inputs.get('exact'):
            return inputs
        digest = hmac.new(self._mac_keys[self._mac_id], canonical(row), hashlib.sha256)
        return dict(inputs, mac='%s:%s:%s' % (MAC_VERSION, self._mac_id, digest.hexdigest()))

    def check_inputs(self, row: Mapping[str, Any]) -> None:
        """RecordConflictError unless the row's inputs carry a MAC this deployment
        made for this very task id, task, queue, arguments and labels."""
        inputs = row.get('inputs') or {}
        version, _, rest = str(inputs.get('mac') or '').partition(':')
        kid, _, digest = rest.partition(':')
        key = self._mac_keys.get(kid)
        if version != MAC_VERSION or key is None or not hmac.compare_digest(
                digest, hmac.new(key, canonical(row), hashlib.sha256).hexdigest()):
            raise RecordConflictError(
                'task %s cannot be retried: its stored task and arguments are not signed by '
                'this deployment\'s MESSAGE_SIGNING_KEY for this task (written by something '
                'else, copied from another task, or signed with a key since retired)'
                % row.get('id'))

    def retry_id(self, task_id: str) -> str:
        """The id of the task that retries ``task_id``: the same for every
        retry of it, and not one anybody without the signing key can tell."""
        return hmac.new(self._retry_key, task_id.encode(), hashlib.sha256).hexdigest()[:32]

    # --- values at rest -----------------------------------------------------------

    def seal_bytes(self, column: str, data: bytes) -> str:
        """``data`` sealed under the current key, ``column`` bound in (only while :attr:`sealing`)."""
        kid = self._seal_id
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[kid].encrypt(nonce, data, column.encode())
        return '%s:%s:%s' % (VERSION, kid, base64.b64encode(nonce + sealed).decode())

    def open_bytes(self, column: str, token: str) -> Optional[bytes]:
        """What :meth:`seal_bytes` sealed, or None under a key this process lacks."""
        version, _, rest = token.partition(':')
        kid, _, body = rest.partition(':')
        cipher = self._ciphers.get(kid)
        if version != VERSION or cipher is None:
            return None
        from cryptography.exceptions import InvalidTag
        try:
            raw = base64.b64decode(body, validate=True)
            return bytes(cipher.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], column.encode()))
        except (InvalidTag, ValueError):
            return None

    def stored(self, row: dict[str, Any], published: bool = False) -> dict[str, Any]:
        """A copy of ``row`` as the database may hold it (a publication's inputs
        signed, sensitive values sealed or dropped); the same row when nothing changes."""
        if published and row.get('inputs') is not None:
            row = dict(row, inputs=self.sign_inputs(row))
        if self.sealing or self.dropping:
            row = self.seal_row(dict(row))
        return row

    def seal_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """The row as the database may hold it (changed in place, and returned)."""
        if self.dropping:
            for column in SEALED_JSON_COLUMNS + SEALED_TEXT_COLUMNS:
                if row.get(column) is not None:
                    row[column] = None
            return row
        if not self.sealing:
            return row
        for column in SEALED_JSON_COLUMNS:
            value = row.get(column)
            if value is not None:
                data = json.dumps(value, separators=(',', ':')).encode()
                row[column] = {SEALED_KEY: self.seal_bytes(column, data)}
        for column in SEALED_TEXT_COLUMNS:
            value = row.get(column)
            if value is not None:
                row[column] = SEALED_PREFIX + self.seal_bytes(column, value.encode())
        if row.get('dead_letter_reason'):
            row['dead_letter_reason'] = short_reason(row['dead_letter_reason'])
        return row

    def open_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """The row with its sealed values opened (or marked unreadable)."""
        for column in SEALED_JSON_COLUMNS:
            value = row.get(column)
            if isinstance(value, dict) and set(value) == {SEALED_KEY}:
                data = self.open_bytes(column, str(value[SEALED_KEY]))
                row[column] = json.loads(data) if data is not None else (
                    {'sealed': UNREADABLE} if column == 'inputs' else UNREADABLE)
        for column in SEALED_TEXT_COLUMNS:
            value = row.get(column)
            if isinstance(value, str) and value.startswith(SEALED_PREFIX):
                data = self.open_bytes(column, value[len(SEALED_PREFIX):])
                row[column] = data.decode() if data is not None else UNREADABLE
        return row


__all__ = ['Sealer', 'canonical']
