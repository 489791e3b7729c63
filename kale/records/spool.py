"""Outcomes kept on this machine's disk while the records store cannot take
them, so a worker killed before the store answers loses none; replayed by
other workers. How: docs/explanation/internals-records.md."""
from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import socket
from typing import Any, Callable, Optional, Sequence

from kale.store.files import open_private

logger = logging.getLogger(__name__)

SUFFIX = '.jsonl'


def default_directory(url: str, database_file: Optional[str]) -> str:
    """Where a store's spools go unless RECORDS_SPOOL_DIR says."""
    if database_file:
        return os.path.realpath(database_file) + '-kale-spool'
    cache = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    digest = hashlib.sha256(url.encode()).hexdigest()[:12]
    return os.path.join(cache, 'kale', 'records-spool', digest)


def _alive(pid: str) -> bool:
    """Whether the process ``pid`` lives (a name that is no pid is left alone, as if it did)."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (ValueError, PermissionError):
        return True
    return True


class Spool:
    """This process's spool file, and the replay of dead processes' ones."""

    def __init__(self, directory: str):
        self.directory = directory
        self.host = socket.gethostname().replace('_', '-')
        self.path = os.path.join(directory, '%s_%d%s' % (self.host, os.getpid(), SUFFIX))
        self._holds = False

    def keep(self, rows: Sequence[dict[str, Any]]) -> None:
        """Append ``rows`` and flush them to disk (OSError when it cannot)."""
        if not rows:
            return
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        data = ''.join(json.dumps(row, default=str, separators=(',', ':')) + '\n'
                       for row in rows).encode()
        fd = open_private(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        self._holds = True

    def written(self) -> None:
        """Everything this process kept is in the store now: empty the file."""
        if not self._holds:
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self._holds = False

    def replay(self, write: Callable[[list[dict[str, Any]]], None]) -> int:
        """Write the spools of gone processes of this machine with ``write``
        and delete them; returns how many rows. A spool that cannot be written
        yet (the store is still down) stays for the next replay."""
        total = 0
        for path in glob.glob(os.path.join(self.directory, '%s_*%s' % (self.host, SUFFIX))):
            if path == self.path or _alive(os.path.basename(path)[len(self.host) + 1:-len(SUFFIX)]):
                continue
            try:
                with open(path) as f:
                    rows = [json.loads(line) for line in f if line.strip()]
            except (OSError, ValueError) as exc:
                logger.warning('records: spool %s cannot be read: %s', path, exc)
                continue
            try:
                write(rows)
            except Exception as exc:        # the store is still down: next time
                logger.info('records: spool %s of a gone worker waits for the store: %s',
                            path, exc)
                continue
            os.unlink(path)
            total += len(rows)
            logger.info('records: wrote %d rows a gone worker had kept in %s', len(rows), path)
        return total
