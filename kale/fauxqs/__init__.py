"""fauxqs: a fast SQS, SNS and S3 emulator from the npm registry, for
``kale sqs-local --engine fauxqs`` and the benchmarks, installed once as pinned
beside this module and started by ``serve.mjs`` on one address
(docs/explanation/internals-transport.md, "fauxqs").
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from typing import Iterator, Optional

from kale.exceptions import FauxqsError

HERE = os.path.dirname(os.path.abspath(__file__))
#: What is copied into the cache folder: the pinned packages and the launcher.
FILES = ('package.json', 'package-lock.json', 'serve.mjs')
#: Seconds the first install may take.
INSTALL_TIMEOUT_SEC = 600
#: Written last, once ``node_modules`` holds every package of the lock file: its digest.
STAMP = '.installed'
#: The prefix of the folder an install runs in before it is renamed into place.
STAGING = '.install-'


def cache_dir() -> str:
    return os.environ.get('KALE_FAUXQS_CACHE') or os.path.join(
        os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache'), 'kale-fauxqs')


def _lock_digest() -> str:
    with open(os.path.join(HERE, 'package-lock.json'), 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


def install_command(npm: str) -> list[str]:
    """Installs exactly the locked versions, quietly."""
    return [npm, 'ci', '--no-audit', '--no-fund', '--loglevel=error']


def _place(content: bytes, target: str) -> None:
    """``target`` made to hold ``content``, unless it does already; never seen
    half written (another process may be starting node on it: copying over it
    in place once left a starting fauxqs an empty serve.mjs)."""
    try:
        with open(target, 'rb') as f:
            if f.read() == content:
                return
    except FileNotFoundError:
        pass
    partial = '%s.%d.tmp' % (target, os.getpid())
    with open(partial, 'wb') as f:
        f.write(content)
    os.replace(partial, target)


def install(folder: Optional[str] = None) -> str:
    """fauxqs installed once in ``folder`` (default :func:`cache_dir`), whoever starts it; the folder."""
    folder = folder or cache_dir()
    digest = _lock_digest()
    os.makedirs(folder, exist_ok=True)
    for name in FILES:
        with open(os.path.join(HERE, name), 'rb') as f:
            _place(f.read(), os.path.join(folder, name))
    if _installed(folder, digest):
        return folder
    with _locked(folder):
        if not _installed(folder, digest):     # another process may have done it meanwhile
            _install(folder, digest)
    return folder


def missing_packages(folder: str) -> list[str]:
    """The lock file's packages (but optional and development ones) with no ``package.json`` in ``folder``."""
    with open(os.path.join(HERE, 'package-lock.json')) as f:
        packages = json.load(f)['packages']
    return [path for path, entry in packages.items()
            if path.startswith('node_modules/') and not entry.get('optional') and not entry.get('dev')
            and not os.path.isfile(os.path.join(folder, path, 'package.json'))]


def _installed(folder: str, digest: str) -> bool:
    try:
        with open(os.path.join(folder, STAMP)) as f:
            stamped = f.read() == digest
    except FileNotFoundError:
        return False
    return stamped and not missing_packages(folder)


@contextlib.contextmanager
def _locked(folder: str) -> Iterator[None]:
    """An exclusive ``flock`` on ``folder``/.lock while the block runs (POSIX only, as the outbox's)."""
    handle = os.open(os.path.join(folder, '.lock'),
                     os.O_RDWR | os.O_CREAT | getattr(os, 'O_NOFOLLOW', 0), 0o600)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)                       # lets go of the lock


def _install(folder: str, digest: str) -> None:
    """``npm ci`` in a staging folder, checked and renamed over ``node_modules``, then the stamp."""
    npm = _npm()
    stamp = os.path.join(folder, STAMP)
    if os.path.exists(stamp):
        os.remove(stamp)
    for name in os.listdir(folder):            # left by an install that was killed
        if name.startswith(STAGING):
            shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
    staging = tempfile.mkdtemp(prefix=STAGING, dir=folder)
    try:
        _install_in(npm, staging)
        target = os.path.join(folder, 'node_modules')
        if os.path.lexists(target):
            os.rename(target, os.path.join(staging, 'node_modules.old'))
        os.rename(os.path.join(staging, 'node_modules'), target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _place(digest.encode(), stamp)


def _npm() -> str:
    """npm's path, once node is found too."""
    npm, node = shutil.which('npm'), shutil.which('node')
    if npm is None or node is None:
        raise FauxqsError('fauxqs needs Node.js 20 or later with npm on PATH (found neither %s)'
                          % ' nor '.join(name for name, path in (('node', node), ('npm', npm)) if not path))
    return npm


def _install_in(npm: str, staging: str) -> None:
    """Every package of the lock file installed in ``staging``."""
    for name in ('package.json', 'package-lock.json'):
        shutil.copyfile(os.path.join(HERE, name), os.path.join(staging, name))
    try:
        done = subprocess.run(install_command(npm), cwd=staging, capture_output=True, text=True,
                              timeout=INSTALL_TIMEOUT_SEC)
    except subprocess.TimeoutExpired:
        raise FauxqsError('installing fauxqs with npm took over %d s (is the npm registry '
                          'reachable?)' % INSTALL_TIMEOUT_SEC) from None
    if done.returncode != 0:
        raise FauxqsError('installing fauxqs with npm failed (exit %d): %s' % (
            done.returncode, ' '.join((done.stderr or done.stdout).split())[-300:]))
    missing = missing_packages(staging)
    if missing:
        raise FauxqsError('installing fauxqs with npm left out %d of its packages (%s)' % (
            len(missing), ', '.join(path.split('node_modules/')[-1] for path in missing[:5])))


def start(port: int, folder: Optional[str] = None, host: str = '127.0.0.1') -> subprocess.Popen:
    """fauxqs serving SQS, SNS and S3 on ``host``:``port``, in a session of its
    own (so Ctrl-C in the terminal reaches its parent, which then stops it).
    Its errors go to the process's stderr (a pipe)."""
    folder = install(folder)
    node = shutil.which('node')
    if node is None:
        raise FauxqsError('fauxqs needs Node.js 20 or later on PATH (found no node)')
    return subprocess.Popen([node, os.path.join(folder, 'serve.mjs'), str(port), host], cwd=folder,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
