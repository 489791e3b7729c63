"""fauxqs's files in its cache are never rewritten in place: several
processes may start it at once (a test run's workers, a benchmark)."""
import os
import shutil

from kale import fauxqs


def _installed(folder):
    os.makedirs(os.path.join(folder, 'node_modules', 'fauxqs'))
    for name in fauxqs.FILES:
        shutil.copyfile(os.path.join(fauxqs.HERE, name), os.path.join(folder, name))
    with open(os.path.join(folder, '.installed'), 'w') as f:
        f.write(fauxqs._lock_digest())


def test_an_installed_copy_is_left_as_it_is(tmp_path):
    folder = str(tmp_path)
    _installed(folder)
    before = {name: os.stat(os.path.join(folder, name)).st_ino for name in fauxqs.FILES}
    assert fauxqs.install(folder) == folder
    assert {name: os.stat(os.path.join(folder, name)).st_ino for name in fauxqs.FILES} == before


def test_a_stale_file_is_replaced_whole(tmp_path):
    folder = str(tmp_path)
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
