"""A throwaway PostgreSQL cluster for the records tests: initdb into a
temporary directory, pg_ctl start on a free port of 127.0.0.1, one database
per test, pg_ctl stop at the end.

``initdb`` refuses to run as root, so as root the cluster belongs to the
``postgres`` user (made by Debian's postgresql package), or to an
unprivileged user made for it. Where no PostgreSQL is installed,
:func:`find_binaries` returns None and the tests skip, saying why (and
fail in CI: tests/support/unavailable.py).
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from typing import Optional

SEARCH = ['/usr/local/bin', '/usr/lib/postgresql/*/bin', '/usr/local/pgsql/bin']
OWNER = 'postgres'


def find_binaries() -> Optional[str]:
    """The directory holding initdb and pg_ctl, or None."""
    found = shutil.which('initdb')
    if found and shutil.which('pg_ctl'):
        return os.path.dirname(found)
    for pattern in SEARCH:
        for folder in sorted(glob.glob(pattern), reverse=True):
            if os.path.exists(os.path.join(folder, 'initdb')) and \
                    os.path.exists(os.path.join(folder, 'pg_ctl')):
                return folder
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


def _owner() -> Optional[str]:
    """The user to run the cluster as (None: ourselves, when not root)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(OWNER)
    except KeyError:
        subprocess.run(['useradd', '--system', '--no-create-home', OWNER], check=True)
    return OWNER


class Cluster:
    """One PostgreSQL server of our own."""

    def __init__(self, binaries: str):
        self.binaries = binaries
        self.owner = _owner()
        self.root = tempfile.mkdtemp(prefix='kale-pg-')
        self.data = os.path.join(self.root, 'data')
        self.port = free_port()
        if self.owner:
            os.chmod(self.root, 0o755)
            shutil.chown(self.root, self.owner)
        self._run('initdb', '-D', self.data, '-U', 'kale', '-A', 'trust', '--no-sync',
                  '-E', 'UTF8', '--no-instructions')
        self.start()

    def _run(self, tool: str, *args: str) -> None:
        command = [os.path.join(self.binaries, tool), *args]
        if self.owner:
            command = ['runuser', '-u', self.owner, '--', *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            raise RuntimeError('%s failed: %s%s' % (tool, result.stdout, result.stderr))

    def start(self) -> None:
        options = ('-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off '
                   '-c synchronous_commit=off -c full_page_writes=off' % (self.port, self.root))
        self._run('pg_ctl', '-D', self.data, '-o', options, '-l',
                  os.path.join(self.root, 'log'), '-w', '-t', '30', 'start')

    def stop(self, mode: str = 'fast') -> None:
        self._run('pg_ctl', '-D', self.data, '-m', mode, '-w', '-t', '30', 'stop')

    def url(self, database: str = 'postgres') -> str:
        return 'postgresql://kale@127.0.0.1:%d/%s' % (self.port, database)

    def new_database(self) -> str:
        """A fresh database; returns its URL."""
        import psycopg
        name = 'kale_%s' % uuid.uuid4().hex[:12]
        deadline = time.monotonic() + 60
        while True:
            try:
                with psycopg.connect('host=127.0.0.1 port=%d user=kale dbname=postgres'
                                     % self.port, autocommit=True) as conn:
                    conn.execute('CREATE DATABASE %s' % name)
                return self.url(name)
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def destroy(self) -> None:
        try:
            self.stop('immediate')
        except Exception:
            pass
        shutil.rmtree(self.root, ignore_errors=True)
