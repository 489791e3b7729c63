"""Which of a batch's tasks are cancelled, without a query per batch on SQLite:
a signal file beside the database, mapped by each worker, tells when its
copy of the cancelled ids is stale (docs/explanation/internals-store.md,
"Cancellations on SQLite", says why the copy is never short of one)."""
from __future__ import annotations

import logging
import mmap
import os
import time
from typing import Any, Callable, Optional, Sequence

from kale.store.files import NO_FOLLOW, open_private

logger = logging.getLogger(__name__)

#: The signal file is the database's path with this suffix.
SIGNAL_SUFFIX = '-kale-cancels'

#: More cancelled records than this and a worker keeps none: it asks the
#: store about every batch.
MAX_KEPT = 50000

#: The stamp's size in bytes (the whole file).
STAMP_BYTES = 8

#: Seconds between two attempts at opening a signal file that failed.
REOPEN_SEC = 30.0

#: Seconds between two checks that the file mapped is still the one at the
#: path (one that was deleted or replaced is mapped again).
RECHECK_SEC = 1.0

#: A stamp no file has: the first check always loads.
_NEVER = object()


def signal_path(url: Any) -> Optional[str]:
    """The signal file beside a SQLite store's file (a ``sqlalchemy.URL``; links
    followed, made absolute); None for any other store (memory, ``file:`` URI)."""
    if url.get_backend_name() != 'sqlite':
        return None
    database = url.database
    if not database or database == ':memory:' or database.startswith('file:') \
            or 'uri' in url.query:
        return None
    return os.path.realpath(database) + SIGNAL_SUFFIX


def send(path: str) -> None:
    """Tell the workers on this machine that a cancellation happened: a new
    random stamp (OSError when the file cannot be written)."""
    fd = open_private(path, os.O_RDWR | os.O_CREAT)
    try:
        os.pwrite(fd, os.urandom(STAMP_BYTES), 0)
    finally:
        os.close(fd)


def open_stamp(path: str) -> tuple[mmap.mmap, tuple[int, int]]:
    """The signal file mapped for reading (made, a zero stamp, when missing) and
    its (device, inode); OSError when it can be neither opened nor made."""
    try:
        fd = open_private(path, os.O_RDWR | os.O_CREAT)
    except PermissionError:
        fd = os.open(path, os.O_RDONLY | NO_FOLLOW)     # another user's: reading is enough
    try:
        found = os.fstat(fd)
        if found.st_size < STAMP_BYTES:
            os.ftruncate(fd, STAMP_BYTES)   # grows with zeros; a stamp already there stays
        return (mmap.mmap(fd, STAMP_BYTES, access=mmap.ACCESS_READ),
                (found.st_dev, found.st_ino))
    finally:
        os.close(fd)


class CancelledIds:
    """A worker's copy of the store's cancelled task ids, kept while the
    signal file's stamp does not change."""

    def __init__(self, path: str, max_kept: Optional[int] = None):
        self.path = path
        self.max_kept = MAX_KEPT if max_kept is None else max_kept
        self._stamp: Optional[mmap.mmap] = None
        self._identity: Optional[tuple[int, int]] = None
        self._recheck_at = 0.0
        self._retry_at = 0.0
        self._seen: Any = _NEVER
        #: The ids, or None when there were too many to keep.
        self._known: Optional[frozenset[str]] = None
        #: How often the ids were loaded (for tests and debugging).
        self.loads = 0

    def candidates(self, task_ids: Sequence[str],
                   load: Callable[[int], list[str]]) -> Sequence[str]:
        """The ids among ``task_ids`` that may be cancelled (the kept ones, loaded
        again with ``load(limit)`` when the stamp changed), or all of them."""
        stamp = self._mapped()
        if stamp is None:
            return task_ids
        seen = stamp[:STAMP_BYTES]
        if seen != self._seen:
            ids = load(self.max_kept + 1)
            self._known = frozenset(ids) if len(ids) <= self.max_kept else None
            self._seen = seen
            self.loads += 1
        known = self._known
        if known is None:
            return task_ids
        return [task_id for task_id in task_ids if task_id in known]

    def _mapped(self) -> Any:
        """The signal file's stamp, mapped again when the file was deleted or
        replaced; None when it cannot be opened (tried again REOPEN_SEC later)."""
        stamp = self._stamp
        if stamp is not None and time.monotonic() >= self._recheck_at and not self._same_file():
            self.close()                # deleted or replaced: map the file there now
            stamp = None
        if stamp is not None or time.monotonic() < self._retry_at:
            return stamp
        try:
            stamp, self._identity = open_stamp(self.path)
        except OSError as exc:
            self._retry_at = time.monotonic() + REOPEN_SEC
            logger.warning('records: cannot open the cancellation signal %s, asking the '
                           'store about every batch: %s', self.path, exc)
            return None
        self._stamp = stamp
        self._recheck_at = time.monotonic() + RECHECK_SEC
        return stamp

    def _same_file(self) -> bool:
        """Whether the path still leads to the file mapped (a system call: once a second)."""
        self._recheck_at = time.monotonic() + RECHECK_SEC
        try:
            found = os.stat(self.path)
        except OSError:
            return False
        return (found.st_dev, found.st_ino) == self._identity \
            and found.st_size >= STAMP_BYTES

    def close(self) -> None:
        if self._stamp is not None:
            self._stamp.close()
            self._stamp = None
        self._seen = _NEVER
