"""fauxqs, a fast SQS emulator from the npm registry, for the benchmarks.

The version is pinned by ``bench/npm/package.json`` and its lock file. The
first start installs it with ``npm ci`` into a cache folder
(``$KALE_BENCH_CACHE``, default ``~/.cache/kale-bench``), again only when the
lock file changes; later starts take a second. ``bench/npm/serve.mjs``
starts it on 127.0.0.1. Needs Node.js 20 or later with npm, and the npm
registry for the first install.

    python -m bench.fauxqs PORT      # install if needed, serve until Ctrl-C
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from typing import Optional

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'npm')
#: What is copied into the cache folder: the pinned packages and the launcher.
FILES = ('package.json', 'package-lock.json', 'serve.mjs')
#: Seconds the first install may take.
INSTALL_TIMEOUT_SEC = 600


class FauxqsError(Exception):
    """fauxqs cannot be installed or started; the message is one line."""


def cache_dir() -> str:
    return os.environ.get('KALE_BENCH_CACHE') or os.path.join(
        os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache'), 'kale-bench')


def _lock_digest() -> str:
    with open(os.path.join(HERE, 'package-lock.json'), 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


def install_command(npm: str) -> list[str]:
    """Installs exactly the locked versions, quietly."""
    return [npm, 'ci', '--no-audit', '--no-fund', '--loglevel=error']


def install(folder: Optional[str] = None) -> str:
    """fauxqs installed in ``folder`` (default :func:`cache_dir`); returns the folder."""
    folder = folder or cache_dir()
    stamp = os.path.join(folder, '.installed')
    digest = _lock_digest()
    os.makedirs(folder, exist_ok=True)
    for name in FILES:
        shutil.copyfile(os.path.join(HERE, name), os.path.join(folder, name))
    if os.path.exists(stamp) and open(stamp).read() == digest \
            and os.path.isdir(os.path.join(folder, 'node_modules', 'fauxqs')):
        return folder
    npm, node = shutil.which('npm'), shutil.which('node')
    if npm is None or node is None:
        raise FauxqsError('--endpoint fauxqs needs Node.js 20 or later with npm on PATH '
                          '(found neither %s)' % ' nor '.join(
                              name for name, path in (('node', node), ('npm', npm)) if not path))
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


def start(port: int, folder: Optional[str] = None) -> subprocess.Popen:
    """fauxqs serving on 127.0.0.1:``port``, in a session of its own (so Ctrl-C
    in the terminal reaches the benchmark first, which then stops it)."""
    folder = install(folder)
    return subprocess.Popen(['node', os.path.join(folder, 'serve.mjs'), str(port)], cwd=folder,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print('usage: python -m bench.fauxqs PORT', file=sys.stderr)
        return 2
    try:
        server = start(int(argv[0]))
    except FauxqsError as exc:
        print('bench.fauxqs: %s' % exc, file=sys.stderr)
        return 1
    print('fauxqs on http://127.0.0.1:%s (pid %d); Ctrl-C stops it' % (argv[0], server.pid))
    try:
        return server.wait()
    except KeyboardInterrupt:
        server.terminate()
        return server.wait()


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
