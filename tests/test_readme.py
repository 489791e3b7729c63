"""The README's quick start works exactly as written."""
import os
import re
import subprocess
import sys

from tests.conftest import ROOT


def readme_block(heading):
    text = open(os.path.join(ROOT, 'README.md')).read()
    section = text.split(heading, 1)[1]
    return re.search(r'```sh\n(.*?)```', section, re.S).group(1)


def test_quick_start_publishes_a_task_and_a_worker_runs_it(tmp_path):
    """Run the block in a scratch copy of the checkout (it writes myapp/)."""
    os.symlink(sys.prefix, tmp_path / '.venv')
    os.symlink(os.path.join(ROOT, 'settings'), tmp_path / 'settings')
    os.symlink(os.path.join(ROOT, 'queue_config.yaml'), tmp_path / 'queue_config.yaml')
    script = 'set -e\n' + readme_block('## Quick start')
    env = {k: v for k, v in os.environ.items() if not k.startswith('KALE_')}
    result = subprocess.run(['bash', '-c', script], cwd=tmp_path, capture_output=True, text=True,
                            env=env, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r'published [0-9a-f]{32}', result.stdout), result.stdout
    assert 'hello, world' in result.stdout, result.stdout + result.stderr
