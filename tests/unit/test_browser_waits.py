"""The dashboard's tests wait in the browser with predicates that cannot throw.

Playwright's ``wait_for_function`` fails at once when its predicate throws,
and ``document.getElementById('x').innerText`` throws while the view that
has ``x`` is not drawn yet (between a click and the address's new frame):
on a loaded machine the slow suite failed so. A test's script reads an
element's property through ``(document.getElementById('x') || {})``."""
import pathlib
import re

TESTS = pathlib.Path(__file__).parent.parent
UNGUARDED = re.compile(r"(getElementById|querySelector)\((['\"])[^'\"]*\2\)\.[A-Za-z]")


def test_no_browser_script_in_the_tests_reads_an_element_that_may_not_be_there():
    found = ['%s:%d' % (path.relative_to(TESTS), number)
             for path in sorted(TESTS.rglob('*.py')) if path.name != 'test_browser_waits.py'
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if UNGUARDED.search(line)]
    assert found == [], "read it through (document.getElementById('x') || {})"


def test_the_check_finds_an_unguarded_read():
    assert UNGUARDED.search("() => document.getElementById('workflow-id').innerText === id")
    assert UNGUARDED.search('document.querySelector("#workers tbody").innerText')
    assert not UNGUARDED.search("(document.getElementById('workflow-id') || {}).innerText")
    assert not UNGUARDED.search("document.querySelectorAll('#tasks tbody tr').length")
