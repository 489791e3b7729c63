"""The docs' code blocks, and what each page's marks say to do with them.

Every fenced block in docs/ is preceded by a mark, an HTML comment the site
does not show:

- ``<!-- doc: run -->``: a Python block runs in the test's process (the
  page's Python blocks in order, in one namespace, in a scratch directory);
  a shell block runs in a scratch directory with the checkout's .venv, the
  page's shell blocks in order as one script, its ``kale sqs-local &`` on a
  free port (tests/e2e/test_docs.py; the tutorial's pages 1 to 3 as one).
- ``<!-- doc: check json|yaml|queue-config|submission -->``: the block is
  parsed (and a queue config loaded, a submission checked by its schema).
- ``<!-- doc: skip (why) -->``: not run, and the reason says why.
"""
from __future__ import annotations

import dataclasses
import os
import re
import socket
import subprocess
import sys
from typing import Optional

from tests.support.endpoint import ROOT

DOCS = os.path.join(ROOT, 'docs')
MARK = re.compile(r'^<!-- doc: (run|check|skip)(?: (.*?))? -->$')
FENCE = re.compile(r'^```(\S*)\n(.*?)^```$', re.S | re.M)
#: The tutorial's pages whose shell blocks run as one session, in this order.
TUTORIAL = ('tutorial/first-task.md', 'tutorial/records.md', 'tutorial/workflow.md')


@dataclasses.dataclass(frozen=True)
class Block:
    page: str           # the path under docs/
    line: int           # of the opening fence
    language: str
    code: str
    mode: Optional[str]  # run, check, skip, or None: unmarked
    argument: str

    def __str__(self) -> str:
        return '%s:%d (%s)' % (self.page, self.line, self.language or 'no language')


def pages() -> list[str]:
    """Every Markdown page of the site's sources, by its path under docs/."""
    found = []
    for folder, dirs, files in os.walk(DOCS):
        dirs[:] = sorted(d for d in dirs if not d.startswith('_'))
        found.extend(os.path.relpath(os.path.join(folder, name), DOCS)
                     for name in sorted(files) if name.endswith('.md'))
    return found


def blocks(page: str) -> list[Block]:
    text = open(os.path.join(DOCS, page)).read()
    found = []
    for match in FENCE.finditer(text):
        before = text[:match.start()].rstrip('\n').rsplit('\n', 1)[-1]
        mark = MARK.match(before)
        found.append(Block(page, text.count('\n', 0, match.start()) + 1, match.group(1),
                           match.group(2), mark.group(1) if mark else None,
                           (mark.group(2) or '') if mark else ''))
    return found


def all_blocks() -> list[Block]:
    return [block for page in pages() for block in blocks(page)]


def runnable(page: str, language: str) -> list[Block]:
    return [b for b in blocks(page) if b.mode == 'run' and b.language == language]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


def scratch(path: str) -> None:
    """A scratch directory that looks like the checkout's root to a block:
    the .venv, the queue config, the settings, the example, the benchmarks and the
    tests (which the benchmarks use)."""
    os.symlink(sys.prefix, os.path.join(path, '.venv'))
    for name in ('queue_config.yaml', 'settings', 'example', 'bench', 'tests'):
        os.symlink(os.path.join(ROOT, name), os.path.join(path, name))


def run_script(script: str, cwd: str, timeout: float = 240,
               engine: str = 'moto') -> subprocess.CompletedProcess:
    """Run shell blocks as one script: ``set -e``, the endpoint (``kale
    sqs-local &``, on ``engine``) and ``kale web &`` on free ports, the
    virtualenv active, and whatever the script started in the background
    stopped at its end."""
    env = {k: v for k, v in os.environ.items() if not k.startswith('KALE_')}
    # As in the reader's shell, the checkout's virtualenv is active.
    env['PATH'] = os.path.dirname(sys.executable) + os.pathsep + env.get('PATH', '')
    if 'kale sqs-local &' in script:
        assert script.count('kale sqs-local &') == 1, script
        port = free_port()
        script = script.replace('kale sqs-local &', 'kale sqs-local --engine %s --port %d &'
                                % (engine, port))
        if engine == 'fauxqs':          # Node.js takes longer than moto to listen
            script = script.replace('kale sqs-local --engine fauxqs --port %d & sleep 1' % port,
                                    'kale sqs-local --engine fauxqs --port %d & sleep 3' % port)
        env['KALE_SQS_ENDPOINT'] = 'http://127.0.0.1:%d' % port
    if 'kale web &' in script:
        port = free_port()
        script = script.replace('kale web &', 'kale web --port %d &' % port)
        script = script.replace('127.0.0.1:8000', '127.0.0.1:%d' % port)
    # SIGKILL: a second SIGTERM while `kale sqs-local` handles the block's own
    # `kill` can hang it for good.
    script = 'set -e\ntrap \'kill -KILL $(jobs -p) 2>/dev/null || true\' EXIT\n' + script
    return subprocess.run(['bash', '-c', script], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=timeout)
