"""``kale settings``: every setting's value from the settings module, secrets
hidden, and one setting's default and meaning, from the one table."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.support.endpoint import subprocess_env


def kale_settings(tmp_path, *args, **env):
    (tmp_path / 'shown_settings.py').write_text(
        'from tests.kale_test_settings import *\n'
        'MESSAGE_SIGNING_KEY = "a-signing-key-that-must-not-show-0123"\n'
        'RATE_LIMIT_URL = "postgresql://kale:hunter2@db.example/flow"\n'
        'QUEUE_PREFIX = "shown-"\n')
    return subprocess.run(
        [sys.executable, '-m', 'kale', 'settings', *args], capture_output=True, text=True,
        timeout=60, cwd=str(tmp_path),
        env=subprocess_env(KALE_SETTINGS_MODULE='shown_settings', **env))


def test_settings_lists_the_values_with_secrets_and_passwords_hidden(tmp_path):
    result = kale_settings(tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert 'settings module: shown_settings' in out
    assert "QUEUE_PREFIX" in out and "'shown-'" in out
    assert 'a-signing-key' not in out and "'(set, hidden)'" in out
    assert 'hunter2' not in out and 'postgresql://kale:***@db.example/flow' in out
    changed = json.loads(kale_settings(tmp_path, '--changed', '--json').stdout)
    assert changed['settings_module'] == 'shown_settings'
    assert changed['settings']['QUEUE_PREFIX'] == 'shown-'
    assert 'RETRY_DELAY_JITTER' not in changed['settings']      # its default


def test_settings_name_explains_one_and_an_unknown_name_is_one_line(tmp_path):
    result = kale_settings(tmp_path, 'retry_delay_jitter')
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        'RETRY_DELAY_JITTER = 0.0', '  default: 0.0',
        '  spread retry delays by up to this fraction either way']
    wrong = kale_settings(tmp_path, 'RETRY_DELAY_JITER')
    assert wrong.returncode == 1
    assert wrong.stderr == 'kale: error: no setting RETRY_DELAY_JITER (did you mean ' \
                           'RETRY_DELAY_JITTER?): `kale settings` lists them\n'


def test_output_into_a_pipe_the_reader_closed_ends_quietly(tmp_path):
    """`kale tasks show ID | head -1`: the reader leaves early; the command
    ends without a BrokenPipeError traceback (exit 141, as a shell says).
    Here the reader leaves before the first line, so the pipe is closed
    whatever the size of the output."""
    (tmp_path / 'shown_settings.py').write_text('from tests.kale_test_settings import *\n')
    kale = subprocess.Popen([sys.executable, '-m', 'kale', 'settings'], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=str(tmp_path),
                            env=subprocess_env(KALE_SETTINGS_MODULE='shown_settings'))
    assert kale.stdout is not None and kale.stderr is not None
    kale.stdout.close()
    errors = kale.stderr.read().decode()
    assert kale.wait(60) == 141, errors
    assert 'Traceback' not in errors and 'BrokenPipeError' not in errors, errors
