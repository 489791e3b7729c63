"""Tests read time through a test clock (tests/support/clock.py); one that
asserts on the machine's clock must be marked ``real_time`` with the reason."""
import ast
import pathlib

TESTS = pathlib.Path(__file__).parent.parent
WALL_CLOCK = {'monotonic', 'time', 'perf_counter'}


def reads_the_wall_clock(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
               and isinstance(n.func.value, ast.Name) and n.func.value.id == 'time'
               and n.func.attr in WALL_CLOCK for n in ast.walk(node))


def real_time_reasons(decorators: list[ast.expr]) -> list[ast.Call]:
    return [d for d in decorators if isinstance(d, ast.Call) and 'real_time' in ast.unparse(d.func)]


def module_marks(tree: ast.Module) -> list[ast.expr]:
    return [node.value for node in tree.body if isinstance(node, ast.Assign)
            and any(getattr(target, 'id', '') == 'pytestmark' for target in node.targets)]


def functions_under_test():
    for path in sorted(TESTS.rglob('test_*.py')):
        tree = ast.parse(path.read_text())
        marks = module_marks(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name.startswith('test_'):
                yield path.relative_to(TESTS), node, node.decorator_list + marks


def test_every_assertion_on_the_machines_clock_says_why():
    unmarked = ['%s:%d %s' % (path, node.lineno, node.name)
                for path, node, decorators in functions_under_test()
                if any(reads_the_wall_clock(a) for a in ast.walk(node) if isinstance(a, ast.Assert))
                and not real_time_reasons(decorators)]
    assert unmarked == [], 'mark these real_time(reason) or give them a test clock'


def test_every_real_time_mark_has_a_reason():
    bare = ['%s:%d %s' % (path, node.lineno, node.name)
            for path, node, decorators in functions_under_test()
            for mark in real_time_reasons(decorators)
            if not (mark.args and isinstance(mark.args[0], ast.Constant) and mark.args[0].value)]
    assert bare == []


def test_the_scan_sees_an_unmarked_assertion():
    tree = ast.parse('def test_x():\n    started = time.monotonic()\n'
                     '    assert time.monotonic() - started < 1\n')
    [assertion] = [n for n in ast.walk(tree) if isinstance(n, ast.Assert)]
    assert reads_the_wall_clock(assertion)
    assert not reads_the_wall_clock(ast.parse('assert clock.now - 1000.0 < 5'))


def test_marks_are_read_from_decorators():
    tree = ast.parse("@pytest.mark.real_time('a real signal')\ndef test_x():\n    pass\n")
    [node] = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    [mark] = real_time_reasons(node.decorator_list)
    assert mark.args[0].value == 'a real signal'
