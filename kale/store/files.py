"""Files the records store and the outbox make, made so that only their owner
can read them, never through a planted symbolic link
(docs/explanation/internals-store.md, "Owner-only files")."""
from __future__ import annotations

import logging
import os
import stat

from kale.exceptions import ImproperlyConfigured

logger = logging.getLogger(__name__)

#: Owner read and write only.
PRIVATE_FILE = 0o600

#: Opening flags that refuse a symbolic link at the path itself.
NO_FOLLOW = getattr(os, 'O_NOFOLLOW', 0) | getattr(os, 'O_CLOEXEC', 0)


def shared_directory(path: str) -> bool:
    """Whether others may create files in the directory holding ``path``."""
    try:
        mode = os.stat(os.path.dirname(os.path.abspath(path)) or '.').st_mode
    except OSError:
        return False
    return bool(mode & stat.S_IWOTH)


def prepare_database(path: str, setting: str = 'RECORDS_URL') -> None:
    """Make the SQLite database file owner-only (a new one, and one of ours
    that others could read); ImproperlyConfigured (naming ``setting``) for a
    symbolic link, or another user's file, in a directory anyone can write to."""
    if os.path.islink(path) and shared_directory(path):
        problem = ('a symbolic link in a directory anyone can write to: name the database '
                   'file itself, in a directory of your own')
        raise ImproperlyConfigured('%s names %s, %s' % (setting, path, problem),
                                   public='%s names %s' % (setting, problem))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NO_FOLLOW, PRIVATE_FILE)
    except FileExistsError:
        _check_existing(path, setting)
        return
    except OSError:         # out of reach: SQLite says so when used
        return
    os.close(fd)
    if shared_directory(path):
        logger.warning('%s: the database %s is in a directory anyone can write to; it is '
                       'readable by its owner only, but a directory of your own is safer',
                       setting, path)


def _check_existing(path: str, setting: str) -> None:
    """A database file there already: refused when another user made it in a
    directory anyone can write to; one of ours others may read made owner-only."""
    try:
        found = os.stat(path)
    except OSError:
        return
    if found.st_uid != os.geteuid():
        if shared_directory(path):
            problem = ('a file another user made in a directory anyone can write to: they '
                       'could read what it holds; use a database file of your own, in a '
                       'directory of your own')
            raise ImproperlyConfigured('%s names %s, %s' % (setting, path, problem),
                                       public='%s names %s' % (setting, problem))
        return
    if found.st_mode & 0o077:
        try:
            os.chmod(path, PRIVATE_FILE)
            logger.warning('%s: the database %s was readable by others; it is now readable by '
                           'its owner only', setting, path)
        except OSError:
            pass


def open_private(path: str, flags: int) -> int:
    """``os.open`` of a file Kale owns: created owner-only, never through a link;
    one of this user's that others may read made owner-only."""
    fd = os.open(path, flags | NO_FOLLOW, PRIVATE_FILE)
    try:
        found = os.fstat(fd)
        if found.st_uid == os.geteuid() and found.st_mode & 0o077:
            os.fchmod(fd, PRIVATE_FILE)
    except OSError:
        os.close(fd)
        raise
    return fd
