"""The example's READMEs work exactly as written (but for the endpoint's
port: see :func:`run_block`); the docs name every command, the tutorial's
task module passes the lint, the install guide names every extra. (The
docs' own blocks run in tests/unit/test_docs.py and tests/e2e/test_docs.py.)"""
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest

from tests.support import docs
from tests.support.endpoint import ROOT


def shell_block(readme, heading):
    """The first ```sh block after ``heading`` in ``readme``."""
    text = open(os.path.join(ROOT, readme)).read()
    section = text.split(heading, 1)[1]
    return re.search(r'```sh\n(.*?)```', section, re.S).group(1)


def free_port():
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


def run_block(block, cwd, engine='moto'):
    """Run a README block with its `kale sqs-local` on a free port instead of
    9324 (KALE_SQS_ENDPOINT points the settings there), so that tests running
    in parallel, or a developer's own endpoint, do not collide; on
    ``engine`` (fauxqs: given three seconds to start, not one)."""
    port = free_port()
    assert block.count('kale sqs-local &') == 1, block
    block = block.replace('kale sqs-local &', 'kale sqs-local --engine %s --port %d &'
                          % (engine, port))
    if engine == 'fauxqs':
        block = block.replace('& sleep 1', '& sleep 3', 1)
    # Whatever happens, stop what the block started in the background. With
    # SIGKILL: the block's own `kill %1` has just sent SIGTERM, and a second
    # SIGTERM while `kale sqs-local` handles the first can hang it for good.
    script = 'set -e\ntrap \'kill -KILL $(jobs -p) 2>/dev/null || true\' EXIT\n' + block
    env = {k: v for k, v in os.environ.items() if not k.startswith('KALE_')}
    env['KALE_SQS_ENDPOINT'] = 'http://127.0.0.1:%d' % port
    return subprocess.run(['bash', '-c', script], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=180)


@pytest.mark.slow
def test_the_example_runs_as_its_readme_says(tmp_path):
    os.symlink(sys.prefix, tmp_path / '.venv')
    os.symlink(os.path.join(ROOT, 'example'), tmp_path / 'example')
    result = run_block(shell_block('example/README.md', '## Run it'), tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert 'published 13 fib task(s)' in result.stdout       # the mix of 20: 13 + 4 + 2 + 1
    tables = [line.split() for line in result.stdout.splitlines()
              if line.startswith(('high_priority', 'default', 'low_priority'))]
    before, after = tables[:3], tables[3:]
    assert sum(int(row[2]) for row in before) == 20          # VISIBLE before the worker
    assert sum(int(row[2]) + int(row[3]) + int(row[4]) for row in after) == 0
    assert [row[5] for row in after] == ['0', '1', '0']       # the failing task, dead-lettered
    assert 'succeeded' in result.stderr and 'dead-lettered' in result.stderr
    total = next(line.split() for line in result.stdout.splitlines() if line.startswith('total'))
    assert total == ['total', '0', '0', '0', '19', '1', '0', '0', '0'], 'records: queued ' \
        'running scheduled succeeded failed cancelled purged deduplicated'


@pytest.mark.slow
def test_the_django_example_runs_as_its_readme_says(tmp_path):
    """In a copy of example/django (it writes its database there)."""
    os.symlink(sys.prefix, tmp_path / '.venv')
    shutil.copytree(os.path.join(ROOT, 'example', 'django'), tmp_path / 'example' / 'django',
                    ignore=shutil.ignore_patterns('db.sqlite3*', '__pycache__'))
    result = run_block(shell_block('example/django/README.md', '## Run it'), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r'order 1 placed; its confirmation is task [0-9a-f]{32}', result.stdout)
    assert 'order 1 (a teapot) confirmed' in result.stderr, result.stderr
    assert re.search(r'orders\.tasks\.SendConfirmation +default +succeeded', result.stdout)


def test_the_docs_document_every_command():
    text = '\n'.join(open(os.path.join(ROOT, 'docs', page)).read() for page in docs.pages())
    for command in ('kale worker', 'kale queues', 'kale purge', 'kale dlq redrive',
                    'kale publish', 'kale sqs-local'):
        assert '`%s' % command in text, command


def test_the_quick_start_task_module_passes_the_lint(tmp_path):
    """The tutorial writes myapp/tasks.py into the checkout, where `make
    lint` checks it too."""
    text = open(os.path.join(ROOT, 'docs', 'tutorial', 'first-task.md')).read()
    start = text.index("cat > myapp/tasks.py <<'PY'\n") + len("cat > myapp/tasks.py <<'PY'\n")
    module = tmp_path / 'tasks.py'
    module.write_text(text[start:text.index('\nPY\n', start) + 1])
    ruff = os.path.join(os.path.dirname(sys.executable), 'ruff')
    result = subprocess.run([ruff, 'check', '--config', os.path.join(ROOT, 'ruff.toml'),
                             str(module)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_extras_table_names_every_extra():
    """The install guide's table names every extra an application may
    install (not the tools: dev, docs)."""
    text = open(os.path.join(ROOT, 'docs', 'how-to', 'install.md')).read()
    setup = open(os.path.join(ROOT, 'setup.py')).read()
    extras = set(re.findall(r"^        '([a-z]+)': \[", setup, re.M)) - {'dev', 'docs'}
    listed = set(re.findall(r'^\| `([a-z]+)` \|', text, re.M))
    assert extras and extras <= listed, extras - listed
