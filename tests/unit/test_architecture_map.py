"""The architecture page's "The code" is the package's map: every module of kale/ is in
it, under its package, and nothing it lists is gone."""
import os
import re

import kale

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.dirname(kale.__file__)
#: A line naming modules: ``name.py`` or ``package/``, several separated by commas.
NAMES = re.compile(r'^((?:\w+(?:\.py|/))(?:,\s*\w+(?:\.py|/))*,?)(?:\s|$)')


def listed_in_map() -> set[str]:
    """The modules the architecture page's map of the package lists."""
    text = open(os.path.join(ROOT, 'docs', 'explanation', 'architecture.md')).read()
    block = text.split('\n## The code\n', 1)[1].split('```', 2)[1]
    listed, packages = set(), []
    for line in block.splitlines():
        match = NAMES.match(line.strip())
        if not match or line.strip() == 'kale/':
            continue
        level = (len(line) - len(line.lstrip())) // 2 - 1
        packages = packages[:level]
        names = [name.strip() for name in match.group(1).split(',') if name.strip()]
        for name in names:
            listed.add('/'.join(packages + [name]))
        if names[-1].endswith('/'):
            packages = packages + [names[-1].rstrip('/')]
    return listed


def modules() -> set[str]:
    found = set()
    for folder, folders, files in os.walk(PACKAGE):
        folders[:] = [name for name in folders if name not in ('__pycache__', 'static')]
        where = os.path.relpath(folder, PACKAGE)
        for name in files:
            if name.endswith('.py') and name != '__init__.py':
                found.add(name if where == '.' else '%s/%s' % (where, name))
    return found


def test_the_map_lists_every_module_and_no_module_that_is_gone():
    listed, found = listed_in_map(), modules()
    assert len(found) > 150
    assert sorted(found - listed) == [], 'add these to docs/explanation/architecture.md "The code"'
    assert sorted(name for name in listed if name.endswith('.py') and name not in found) == []


def test_the_map_reader_reads_packages_and_lists():
    assert NAMES.match('worker.py, admin.py,').group(1) == 'worker.py, admin.py,'
    assert NAMES.match('  not a module line'.strip()) is None
