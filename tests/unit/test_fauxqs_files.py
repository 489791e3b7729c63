"""fauxqs's files in its cache are never rewritten in place, and its
``node_modules`` is stamped only once it holds every package of the lock
file: several processes may start it at once (a test run's workers, a
benchmark). Here npm is a stand-in that lays out the lock file's packages;
tests/e2e/test_fauxqs_install.py runs the real one."""
import json
import os
import shutil
import sys

import pytest

from kale import fauxqs

#: Lays out node_modules as ``npm ci`` would, but for the package named by
#: $FAKE_NPM_SKIP; notes the folder it ran in.
FAKE_NPM = '''#!%s
import json, os
with open('package-lock.json') as f:
    packages = json.load(f)['packages']
for path in packages:
    if path.startswith('node_modules/') and path.rsplit('/', 1)[-1] != os.environ.get('FAKE_NPM_SKIP'):
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, 'package.json'), 'w') as f:
            f.write('{}')
with open(os.environ['FAKE_NPM_LOG'], 'a') as f:
    f.write(os.getcwd() + '\\n')
'''


def _packages():
    with open(os.path.join(fauxqs.HERE, 'package-lock.json')) as f:
        return [path for path in json.load(f)['packages'] if path.startswith('node_modules/')]


def _missing(folder):
    return [path for path in _packages()
            if not os.path.isfile(os.path.join(folder, path, 'package.json'))]


def _installed(folder):
    for path in _packages():
        os.makedirs(os.path.join(folder, path), exist_ok=True)
        with open(os.path.join(folder, path, 'package.json'), 'w') as f:
            f.write('{}')
    for name in fauxqs.FILES:
        shutil.copyfile(os.path.join(fauxqs.HERE, name), os.path.join(folder, name))
    with open(os.path.join(folder, '.installed'), 'w') as f:
        f.write(fauxqs._lock_digest())


@pytest.fixture
def fake_npm(tmp_path, monkeypatch):
    """npm and node on PATH are the stand-ins; returns the folders npm ran in."""
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    (bin_dir / 'npm').write_text(FAKE_NPM % sys.executable)
    (bin_dir / 'npm').chmod(0o755)
    (bin_dir / 'node').write_text('#!/bin/sh\n')
    (bin_dir / 'node').chmod(0o755)
    log = tmp_path / 'npm.log'
    monkeypatch.setenv('PATH', str(bin_dir))
    monkeypatch.setenv('FAKE_NPM_LOG', str(log))
    return lambda: log.read_text().split() if log.exists() else []


def test_an_installed_copy_is_left_as_it_is(tmp_path, fake_npm):
    folder = str(tmp_path / 'cache')
    _installed(folder)
    before = {name: os.stat(os.path.join(folder, name)).st_ino for name in fauxqs.FILES}
    assert fauxqs.install(folder) == folder
    assert {name: os.stat(os.path.join(folder, name)).st_ino for name in fauxqs.FILES} == before
    assert fake_npm() == []


def test_a_stale_file_is_replaced_whole(tmp_path, fake_npm):
    folder = str(tmp_path / 'cache')
    _installed(folder)
    serve = os.path.join(folder, 'serve.mjs')
    with open(serve, 'w') as f:
        f.write('// an older serve.mjs')
    inode = os.stat(serve).st_ino
    fauxqs.install(folder)
    with open(serve, 'rb') as f, open(os.path.join(fauxqs.HERE, 'serve.mjs'), 'rb') as g:
        assert f.read() == g.read()
    assert os.stat(serve).st_ino != inode          # a new file, renamed over the old one
    assert not [name for name in os.listdir(folder) if name.endswith('.tmp')]


def test_a_stamp_over_an_incomplete_node_modules_is_installed_again(tmp_path, fake_npm):
    folder = str(tmp_path / 'cache')
    _installed(folder)
    shutil.rmtree(os.path.join(folder, 'node_modules', 'tslib'))
    assert _missing(folder) == ['node_modules/tslib']
    fauxqs.install(folder)
    [ran_in] = fake_npm()
    assert os.path.dirname(ran_in) == folder and os.path.basename(ran_in).startswith('.install-')
    assert _missing(folder) == []
    assert sorted(os.listdir(folder)) == sorted(['.installed', '.lock', 'node_modules', *fauxqs.FILES])


def test_an_install_that_leaves_out_a_package_is_not_stamped(tmp_path, fake_npm, monkeypatch):
    folder = str(tmp_path / 'cache')
    monkeypatch.setenv('FAKE_NPM_SKIP', 'tslib')
    with pytest.raises(fauxqs.FauxqsError, match=r'^installing fauxqs with npm left out 1 of '
                                                 r'its packages \(tslib\)$'):
        fauxqs.install(folder)
    assert sorted(os.listdir(folder)) == sorted(['.lock', *fauxqs.FILES])   # no stamp, no staging
    monkeypatch.delenv('FAKE_NPM_SKIP')
    fauxqs.install(folder)
    assert len(fake_npm()) == 2 and _missing(folder) == []


def test_an_install_of_a_new_lock_file_replaces_node_modules_whole(tmp_path, fake_npm):
    folder = str(tmp_path / 'cache')
    _installed(folder)
    with open(os.path.join(folder, '.installed'), 'w') as f:
        f.write('the digest of an older lock file')
    stale = os.path.join(folder, 'node_modules', 'left-over')
    os.makedirs(stale)
    fauxqs.install(folder)
    assert len(fake_npm()) == 1 and not os.path.exists(stale)
    with open(os.path.join(folder, '.installed')) as f:
        assert f.read() == fauxqs._lock_digest()
