"""Labels: the strings a publish keeps in a task's record (a tenant, an
order id), checked before anything is sent."""
from __future__ import annotations

import re
from typing import Any, Mapping

from kale.exceptions import PublishError

#: What a label key may be: it also appears in filters, ``label.KEY=VALUE``.
LABEL_KEY = re.compile(r'[A-Za-z0-9_.:-]{1,64}')
MAX_LABEL_CHARS = 256
MAX_LABELS = 32


def _label_value(value: Any) -> Any:
    """A label value as text when it is a number or a boolean; anything else as given."""
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, (int, float)):
        return str(value)
    return value


def _check_label(task_name: str, who: str, key: Any, value: Any) -> str:
    """The text of one label's value, or PublishError naming its bad key or value."""
    if not (isinstance(key, str) and LABEL_KEY.fullmatch(key)):
        raise PublishError('task %s: %s key %r must be 1-64 letters, digits or _.:-'
                           % (task_name, who, key))
    value = _label_value(value)
    if not isinstance(value, str) or len(value) > MAX_LABEL_CHARS:
        raise PublishError('task %s: %s value of %r must be a string of at most %d '
                           'characters, got %r' % (task_name, who, key, MAX_LABEL_CHARS,
                                                   value))
    return value


def check_labels(task_name: str, labels: Any, who: str = 'labels') -> dict[str, str]:
    """Labels as a dict of strings, or PublishError naming the task and the
    bad entry. Numbers and booleans become their text."""
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise PublishError('task %s: %s must be a dict of strings, got %r' % (task_name, who, labels))
    if len(labels) > MAX_LABELS:
        raise PublishError('task %s: %s has %d entries, at most %d are allowed'
                           % (task_name, who, len(labels), MAX_LABELS))
    return {key: _check_label(task_name, who, key, value) for key, value in labels.items()}


__all__ = ['LABEL_KEY', 'MAX_LABELS', 'MAX_LABEL_CHARS', 'check_labels']
