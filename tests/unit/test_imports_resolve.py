"""Every import of a Kale module, anywhere in the repository (the package,
the tests, the benchmarks and the example, at the top of a module or inside
a function), names a module and names that exist: a module moved or renamed
fails here, not in the first run of the code that imports it late."""
from __future__ import annotations

import ast
import importlib
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PLACES = ('kale', 'tests', 'bench', 'example')
#: Modules that need an extra that may be missing, or a platform.
OPTIONAL = ('kale.contrib.django',)


def imports() -> dict[tuple[str, str], list[str]]:
    """(module, name or '') -> where it is imported."""
    found: dict[tuple[str, str], list[str]] = {}
    for place in PLACES:
        for path in sorted((ROOT / place).rglob('*.py')):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                        (node.module == 'kale' or node.module.startswith('kale.')):
                    for alias in node.names:
                        found.setdefault((node.module, alias.name), []).append(
                            '%s:%d' % (path.relative_to(ROOT), node.lineno))
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.name.startswith('kale.'):
                            found.setdefault((alias.name, ''), []).append(
                                '%s:%d' % (path.relative_to(ROOT), node.lineno))
    return found


def test_every_kale_import_resolves():
    missing = []
    for (module, name), where in sorted(imports().items()):
        if module.startswith(OPTIONAL):
            continue
        try:
            imported = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            missing.append('%s (%s): %s' % (module, where[0], exc))
            continue
        if name and name != '*' and not hasattr(imported, name):
            try:
                importlib.import_module('%s.%s' % (module, name))
            except ModuleNotFoundError:
                missing.append('%s.%s (%s)' % (module, name, where[0]))
    assert not missing, '\n'.join(missing)


@pytest.mark.parametrize('text, bad', [('from kale.nowhere import x', 'kale.nowhere'),
                                        ('from kale.codec import not_a_name', 'not_a_name')])
def test_a_bad_import_is_found(tmp_path, monkeypatch, text, bad):
    (tmp_path / 'example').mkdir()
    (tmp_path / 'example' / 'late.py').write_text('def f():\n    %s\n' % text)
    monkeypatch.setattr(sys.modules[__name__], 'ROOT', tmp_path)
    monkeypatch.setattr(sys.modules[__name__], 'PLACES', ('example',))
    with pytest.raises(AssertionError, match=bad):
        test_every_kale_import_resolves()
