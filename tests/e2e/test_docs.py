"""The docs' shell blocks run as written, against the local endpoint in a
scratch directory, and the site builds with no warning, broken link or
missing reference (``mkdocs build --strict``, what ``make docs`` runs)."""
import os
import re
import subprocess
import sys

import pytest

from tests.support import docs
from tests.support.endpoint import ROOT

SHELL_PAGES = sorted({block.page for block in docs.all_blocks()
                      if block.mode == 'run' and block.language == 'sh'}
                     - set(docs.TUTORIAL))


def script_of(*pages):
    return '\n'.join(block.code for page in pages for block in docs.runnable(page, 'sh'))


@pytest.mark.slow
def test_the_tutorial_runs_from_nothing_to_a_workflow(tmp_path):
    """Steps 1 to 3 in one shell, as a reader follows them."""
    docs.scratch(str(tmp_path))
    result = docs.run_script(script_of(*docs.TUTORIAL), str(tmp_path))
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert re.search(r'published [0-9a-f]{32}', result.stdout), output
    assert 'hello, world' in result.stdout, output
    assert 'queued' in result.stdout                           # records.get before the worker
    assert "card refused for order 7" in result.stdout, output  # kale tasks show
    assert '"by_status"' in result.stdout, output              # the REST API's summary
    assert 'total: 9' in result.stdout, output


@pytest.mark.slow
@pytest.mark.parametrize('page', SHELL_PAGES)
def test_the_shell_blocks_of_a_page_run(page, tmp_path):
    docs.scratch(str(tmp_path))
    result = docs.run_script(script_of(page), str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path):
    mkdocs = os.path.join(os.path.dirname(sys.executable), 'mkdocs')
    result = subprocess.run([mkdocs, 'build', '--strict', '--site-dir', str(tmp_path / 'site')],
                            cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, 'NO_MKDOCS_2_WARNING': '1'})
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'WARNING' not in result.stderr, result.stderr
    built = tmp_path / 'site'
    for page in ('reference/settings', 'reference/cli', 'reference/rest-api',
                 'reference/python-api', 'tutorial/first-task'):
        assert (built / page / 'index.html').exists(), page
    api = (built / 'reference' / 'python-api' / 'index.html').read_text()
    assert 'run_eagerly' in api and 'apublish_batch' in api
