"""The publisher's proof on an outbox row, and the relay's check of it: the
relay never signs what it reads (docs/explanation/internals-workflow.md, "The publisher's proof")."""
from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any, Mapping, Optional

from kale.codec.keys import signing_keys
from kale.config import Config

#: The version of what a row's MAC covers, in front of its key id.
VERSION = 'o1'
#: The columns a row's MAC covers, in this order.
COLUMNS = ('task_id', 'task', 'queue', 'body', 'attributes', 'delay_sec', 'group_id',
           'dedup_id', 'record', 'unique_key', 'unique_for_sec', 'created_at')


def _key(signing_key: bytes) -> bytes:
    return hmac.new(signing_key, b'kale-outbox:rows', hashlib.sha256).digest()


def _canonical(row: Mapping[str, Any]) -> bytes:
    return json.dumps([VERSION] + [row.get(name) for name in COLUMNS], sort_keys=True,
                      separators=(',', ':'), ensure_ascii=True).encode()


def as_stored(value: Any) -> Any:
    """A JSON column's value as the database gives it back (tuples become lists)."""
    return None if value is None else json.loads(json.dumps(value))


def sign(config: Config, row: Mapping[str, Any]) -> str:
    """The MAC of a row as it is inserted (its JSON columns as stored)."""
    keys = signing_keys(config=config)
    assert keys.current is not None
    digest = hmac.new(_key(keys.current), _canonical(row), hashlib.sha256).hexdigest()
    return '%s:%s:%s' % (VERSION, keys.current_id, digest)


def problem(config: Config, row: Mapping[str, Any]) -> Optional[str]:
    """Why the relay must not send ``row`` (a row read back), or None."""
    version, _, rest = str(row.get('mac') or '').partition(':')
    kid, _, digest = rest.partition(':')
    if not version:
        return 'it carries no publisher\'s MAC (not written by kale.outbox.publish)'
    key = signing_keys(config=config).accepted.get(kid)
    if version != VERSION or key is None:
        return ('its MAC is not one this deployment makes (written by something else, or '
                'signed with a key since retired)')
    if not hmac.compare_digest(digest, hmac.new(_key(key), _canonical(row),
                                                hashlib.sha256).hexdigest()):
        return 'its MAC does not match its columns (written by something else, or changed)'
    return None


__all__ = ['COLUMNS', 'as_stored', 'problem', 'sign']
