"""The workflows' pages of ``GET /api/workflows``: cursors that name where
a page ended, so that rows created in one millisecond are neither lost nor
repeated."""
from __future__ import annotations

import base64
import binascii
import datetime
import json
from typing import TYPE_CHECKING, Any, Optional

from kale import workflow
from kale.exceptions import BadFilterError

if TYPE_CHECKING:
    from kale.app import App

#: The most rows one ``list_workflows`` call returns.
WORKFLOWS_MAX = 1000


def decode_workflow_cursor(text: str) -> tuple[str, float, str, int]:
    """(created_at as listed, the end of its millisecond as epoch seconds,
    the last id served, how many of that millisecond were served)."""
    try:
        raw = base64.urlsafe_b64decode(text + '=' * (-len(text) % 4))
        created_at, last_id, seen = json.loads(raw)
        moment = datetime.datetime.fromisoformat(created_at.replace('Z', '+00:00'))
        if isinstance(last_id, str) and len(last_id) <= 128 and type(seen) is int \
                and 0 < seen < WORKFLOWS_MAX and moment.tzinfo is not None:
            return created_at, moment.timestamp() + 0.001, last_id, seen
    except (ValueError, TypeError, AttributeError, binascii.Error):
        pass
    raise BadFilterError('cursor %r is not one this server gave out' % text[:100])


def workflow_page(status: Optional[str], limit: int, cursor: Optional[str],
                  app: 'App') -> tuple[list[dict[str, Any]], Optional[str]]:
    """Up to ``limit`` workflows, newest first, after ``cursor``; and the
    cursor of the next page (None on the last). Workflows are paged by
    "created before" a millisecond, so a cursor names the last row's
    millisecond, its id and how many of that millisecond were served: the
    next page reads from the end of that millisecond and skips those (in the
    store's own order, the same every time)."""
    created_at, before, last_id, seen = decode_workflow_cursor(cursor) if cursor else \
        ('', None, '', 0)
    # + 1 to tell whether more follow, + 1 for a row rounded up into the next millisecond
    want = min(limit + seen + 2, WORKFLOWS_MAX)
    read = workflow.list_workflows(status, want, before, app=app)
    rows, skip = _after_cursor(read, created_at, last_id, seen) if cursor else (read, 0)
    page = rows[skip:skip + limit]
    if not page:
        return page, None
    last = page[-1]
    served = sum(1 for row in rows[:skip + limit] if row['created_at'] == last['created_at'])
    after = base64.urlsafe_b64encode(json.dumps([last['created_at'], last['id'], served],
                                                separators=(',', ':')).encode()).decode().rstrip('=')
    if len(rows) > skip + limit:
        return page, after
    if len(read) < want or served + 3 > WORKFLOWS_MAX:
        return page, None
    # The read stopped at WORKFLOWS_MAX rows: whether more follow, a page of one tells.
    return page, after if workflow_page(status, 1, after, app)[0] else None


def _after_cursor(read: list[dict[str, Any]], created_at: str, last_id: str,
                  seen: int) -> tuple[list[dict[str, Any]], int]:
    """The rows read from a cursor's millisecond on, and how many of them its
    page served already."""
    rows = [row for row in read if row['created_at'] <= created_at]
    ids = [row['id'] for row in rows[:seen + 1] if row['created_at'] == created_at]
    return rows, ids.index(last_id) + 1 if last_id in ids else seen
