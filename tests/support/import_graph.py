"""Kale's import graph, read from the source with ast: every import between
its modules, at the top of a file or inside a function, and
``importlib.import_module('kale....')`` with a literal name (an import all
the same, which import-linter does not see); only what is under ``if
TYPE_CHECKING:`` is left out (it never runs)."""
from __future__ import annotations

import ast
import os
from typing import Iterator, Optional

import kale

PACKAGE_DIR = os.path.dirname(kale.__file__)


def module_files() -> dict[str, str]:
    """Every module of the package: dotted name -> file."""
    found = {}
    root = os.path.dirname(PACKAGE_DIR)
    for folder, _, files in os.walk(PACKAGE_DIR):
        for name in files:
            if name.endswith('.py'):
                path = os.path.join(folder, name)
                parts = os.path.relpath(path, root)[:-3].split(os.sep)
                if parts[-1] == '__init__':
                    parts.pop()
                found['.'.join(parts)] = path
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == 'TYPE_CHECKING') or \
        (isinstance(test, ast.Attribute) and test.attr == 'TYPE_CHECKING')


def _statements(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.If) and _type_checking(child):
            for other in child.orelse:
                yield other
                yield from _statements(other)
            continue
        yield child
        yield from _statements(child)


def imported_names(module: str, path: str) -> Iterator[tuple[str, int]]:
    """The dotted names ``module`` imports (at run time), with their lines."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    package = module if path.endswith('__init__.py') else module.rpartition('.')[0]
    for node in _statements(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                parts = package.split('.')
                parts = parts[:len(parts) - node.level + 1]
                base = '.'.join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                yield '%s.%s' % (base, alias.name), node.lineno      # a module, or a name in base
        elif isinstance(node, ast.Call) and _import_module_call(node):
            yield node.args[0].value, node.lineno       # type: ignore[attr-defined]


def _import_module_call(node: ast.Call) -> bool:
    func = node.func
    named = (isinstance(func, ast.Attribute) and func.attr == 'import_module') or \
        (isinstance(func, ast.Name) and func.id == 'import_module')
    return named and bool(node.args) and isinstance(node.args[0], ast.Constant) and \
        isinstance(node.args[0].value, str)


def _module_of(name: str, modules: dict[str, str]) -> Optional[str]:
    """The module a dotted name is, or is in."""
    while name and name not in modules:
        name = name.rpartition('.')[0]
    return name or None


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {module it imports: the first line that imports it}."""
    modules = module_files()
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        edges: dict[str, int] = {}
        for name, line in imported_names(module, path):
            target = _module_of(name, modules)
            if target is not None and target != module:
                edges.setdefault(target, line)
        graph[module] = edges
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the groups of modules that import each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            groups.append(group)

    for node in graph:
        if node not in index:
            visit(node)
    return groups


def circles() -> list[list[str]]:
    """The groups of more than one module that import each other, each sorted."""
    graph = {module: set(edges) for module, edges in import_graph().items()}
    return sorted(sorted(group) for group in strongly_connected(graph) if len(group) > 1)


def describe(group: list[str]) -> str:
    """A circle's imports: ``a (line 12) -> b`` for each edge inside it."""
    graph = import_graph()
    members = set(group)
    return '; '.join('%s:%d -> %s' % (module, line, target)
                     for module in group for target, line in sorted(graph[module].items())
                     if target in members)
