"""The pinned baseline: the commit named in ``bench/baseline``, checked out
into the benchmark's cache for ``--versus-baseline``.

``git archive`` of that commit is unpacked once into
``$KALE_BENCH_CACHE/baseline-<commit>`` (default ``~/.cache/kale-bench``)
and reused after; its worker runs from there, beside this checkout's, in
``drain-versus``. Needs git and the commit in this clone's history (a fresh
clone has it).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile

from bench.environment import ROOT
from bench.servers import BenchError

#: The file that names the pinned commit.
BASELINE_FILE = os.path.join(ROOT, 'bench', 'baseline')


def cache_dir() -> str:
    """The benchmark's cache: ``$KALE_BENCH_CACHE``, default ``~/.cache/kale-bench``."""
    return os.environ.get('KALE_BENCH_CACHE') or os.path.join(
        os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache'), 'kale-bench')


def pinned_commit(path: str = BASELINE_FILE) -> str:
    """The commit ``bench/baseline`` names (its one line that is not a comment)."""
    with open(path) as f:
        lines = [line.strip() for line in f if line.strip() and not line.startswith('#')]
    if len(lines) != 1:
        raise BenchError('%s must name one commit (found %d lines)' % (path, len(lines)))
    return lines[0]


def checkout(commit: str = '', cache: str = '') -> str:
    """A directory holding ``commit`` (default the pinned one) as its files,
    made once in the cache; BenchError when git cannot produce it."""
    commit = commit or pinned_commit()
    target = os.path.join(cache or cache_dir(), 'baseline-%s' % commit)
    if os.path.isdir(os.path.join(target, 'kale')):
        return target
    try:
        archive = subprocess.run(['git', '-C', ROOT, 'archive', '--format=tar', commit],
                                 capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BenchError('--versus-baseline needs git: %s' % exc) from None
    if archive.returncode != 0:
        raise BenchError('--versus-baseline: git cannot give commit %s (%s); fetch the full '
                         'history' % (commit[:12], archive.stderr.decode(errors='replace')
                                      .strip().splitlines()[-1:]))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    building = tempfile.mkdtemp(prefix='baseline-', dir=os.path.dirname(target))
    try:
        with tempfile.TemporaryFile() as tar:
            tar.write(archive.stdout)
            tar.seek(0)
            with tarfile.open(fileobj=tar) as files:
                # this clone's own commit; the filter where Python has it
                files.extractall(building, **({'filter': 'data'} if hasattr(
                    tarfile, 'data_filter') else {}))
        os.replace(building, target)
    except OSError:
        shutil.rmtree(building, ignore_errors=True)
        if not os.path.isdir(os.path.join(target, 'kale')):      # not another's run's
            raise
    return target
