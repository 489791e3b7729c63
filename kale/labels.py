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
    checked = {}
    for key, value in labels.items():
        if not (isinstance(key, str) and LABEL_KEY.fullmatch(key)):
            raise PublishError('task %s: %s key %r must be 1-64 letters, digits or _.:-'
                               % (task_name, who, key))
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        elif isinstance(value, bool):
            value = 'true' if value else 'false'
        if not isinstance(value, str) or len(value) > MAX_LABEL_CHARS:
            raise PublishError('task %s: %s value of %r must be a string of at most %d '
                               'characters, got %r' % (task_name, who, key, MAX_LABEL_CHARS,
                                                       value))
        checked[key] = value
    return checked


__all__ = ['LABEL_KEY', 'MAX_LABELS', 'MAX_LABEL_CHARS', 'check_labels']
