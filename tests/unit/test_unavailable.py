"""A test whose real component cannot start skips on a developer's machine
and fails in CI (tests/support/unavailable.py), and the suite reaches for
nothing else: no importorskip, no skipif."""
import os
import re
import subprocess

import pytest

from tests.support.unavailable import require_module, unavailable

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS)


def outcome(call, *args):
    """What a test calling ``call(*args)`` ends as, and the line it shows (a
    skip escaping a test would skip this test, not fail it: caught here)."""
    try:
        call(*args)
    except pytest.fail.Exception as exc:
        return 'failed', str(exc)
    except pytest.skip.Exception as exc:
        return 'skipped', str(exc)
    return 'returned', ''


@pytest.mark.parametrize('value', ['true', 'TRUE', '1'])
def test_in_ci_a_component_that_cannot_start_fails_saying_why(monkeypatch, value):
    monkeypatch.setenv('CI', value)
    assert outcome(unavailable, 'no Chromium found') == (
        'failed', 'no Chromium found (CI is set: a component a test needs must start in CI, '
                  'so this fails instead of skipping)')


@pytest.mark.parametrize('value', [None, '', 'false', '0'])
def test_elsewhere_it_skips_saying_why(monkeypatch, value):
    if value is None:
        monkeypatch.delenv('CI', raising=False)
    else:
        monkeypatch.setenv('CI', value)
    assert outcome(unavailable, 'no Chromium found') == ('skipped', 'no Chromium found')


def test_a_module_that_is_not_installed_is_unavailable(monkeypatch):
    monkeypatch.setenv('CI', 'true')
    ended, line = outcome(require_module, 'kale_no_such_module', 'the test needs it')
    assert ended == 'failed' and line.startswith(
        "kale_no_such_module cannot be imported (No module named 'kale_no_such_module'): "
        "the test needs it (CI is set")
    monkeypatch.delenv('CI')
    assert outcome(require_module, 'kale_no_such_module', 'the test needs it')[0] == 'skipped'
    assert require_module('json', 'unused') is __import__('json')


def test_no_test_skips_on_a_missing_component_but_through_unavailable():
    """importorskip and skipif decide at import or collection, where CI cannot
    turn them into failures; a test calls require_module or unavailable."""
    found = []
    for folder, _, files in os.walk(TESTS):
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith('.py') or path == os.path.abspath(__file__):
                continue
            with open(path) as f:
                for number, line in enumerate(f, 1):
                    if re.search(r'\bimportorskip\(|\bmark\.skipif\b|\bmark\.skip\(', line):
                        found.append('%s:%d' % (os.path.relpath(path, TESTS), number))
    assert found == []


@pytest.mark.parametrize('given, seen', [(None, 'true'), ('1', '1')])
def test_the_ci_script_runs_the_suite_with_ci_set(tmp_path, given, seen):
    """.ci/run sets CI=true unless CI is set; here make only notes what it saw
    (and Chromium and PostgreSQL are there, so nothing is installed)."""
    for name in ('make', 'chromium', 'initdb'):
        tool = tmp_path / name
        tool.write_text('#!/bin/sh\necho "$0 $* CI=$CI" >> %s\n' % (tmp_path / 'ran'))
        tool.chmod(0o755)
    env = {key: value for key, value in os.environ.items() if key != 'CI'}
    env['PATH'] = '%s%s%s' % (tmp_path, os.pathsep, env['PATH'])
    if given is not None:
        env['CI'] = given
    done = subprocess.run(['bash', os.path.join(ROOT, '.ci', 'run')], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / 'ran').read_text().splitlines() == [
        '%s/make test CI=%s' % (tmp_path, seen), '%s/make test-slow CI=%s' % (tmp_path, seen)]
