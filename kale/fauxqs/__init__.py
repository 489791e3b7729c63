"""fauxqs: a fast SQS, SNS and S3 emulator from the npm registry, for
``kale sqs-local --engine fauxqs`` and the benchmarks.

moto (the default engine, the ``local`` extra) needs nothing but pip and
serves a few dozen tasks a second; fauxqs serves thousands, so local runs
show Kale's own speed. It runs on Node.js 20 or later with npm, from the
system. The version is pinned by ``package.json`` and its lock file beside
this module: the first start installs exactly that with ``npm ci`` into a
cache folder (``$KALE_FAUXQS_CACHE``, default ``~/.cache/kale-fauxqs``),
again only when the lock file changes; later starts take a second.
``serve.mjs`` starts it on one address.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from typing import Optional

from kale.exceptions import FauxqsError

HERE = os.path.dirname(os.path.abspath(__file__))
#: What is copied into the cache folder: the pinned packages and the launcher.
FILES = ('package.json', 'package-lock.json', 'serve.mjs')
#: Seconds the first install may take.
INSTALL_TIMEOUT_SEC = 600


def cache_dir() -> str:
    return os.environ.get('KALE_FAUXQS_CACHE') or os.path.join(
        os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache'), 'kale-fauxqs')


def _lock_digest() -> str:
    with open(os.path.join(HERE, 'package-lock.json'), 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


def install_command(npm: str) -> list[str]:
    """Installs exactly the locked versions, quietly."""
    return [npm, 'ci', '--no-audit', '--no-fund', '--loglevel=error']


def _place(source: str, target: str) -> None:
    """``target`` made a copy of ``source``, unless it is one already; never
    seen half written (another process may be starting node on it: copying
    over it in place once left a starting fauxqs an empty serve.mjs)."""
    with open(source, 'rb') as f:
        content = f.read()
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
    """fauxqs installed in ``folder`` (default :func:`cache_dir`); returns the folder."""
    folder = folder or cache_dir()
    stamp = os.path.join(folder, '.installed')
    digest = _lock_digest()
    os.makedirs(folder, exist_ok=True)
    for name in FILES:
        _place(os.path.join(HERE, name), os.path.join(folder, name))
    if os.path.exists(stamp) and open(stamp).read() == digest \
            and os.path.isdir(os.path.join(folder, 'node_modules', 'fauxqs')):
        return folder
    npm, node = shutil.which('npm'), shutil.which('node')
    if npm is None or node is None:
        raise FauxqsError('fauxqs needs Node.js 20 or later with npm on PATH (found neither %s)'
                          % ' nor '.join(name for name, path in (('node', node), ('npm', npm))
                                         if not path))
    try:
        done = subprocess.run(install_command(npm), cwd=folder, capture_output=True, text=True,
                              timeout=INSTALL_TIMEOUT_SEC)
    except subprocess.TimeoutExpired:
        raise FauxqsError('installing fauxqs with npm took over %d s (is the npm registry '
                          'reachable?)' % INSTALL_TIMEOUT_SEC) from None
    if done.returncode != 0:
        raise FauxqsError('installing fauxqs with npm failed (exit %d): %s' % (
            done.returncode, ' '.join((done.stderr or done.stdout).split())[-300:]))
    with open(stamp, 'w') as f:
        f.write(digest)
    return folder


def start(port: int, folder: Optional[str] = None, host: str = '127.0.0.1') -> subprocess.Popen:
    """fauxqs serving SQS, SNS and S3 on ``host``:``port``, in a session of its
    own (so Ctrl-C in the terminal reaches its parent, which then stops it).
    Its errors go to the process's stderr (a pipe)."""
    folder = install(folder)
    node = shutil.which('node')
    if node is None:
        raise FauxqsError('fauxqs needs Node.js 20 or later on PATH (found no node)')
    return subprocess.Popen([node, os.path.join(folder, 'serve.mjs'), str(port), host],
                            cwd=folder, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
