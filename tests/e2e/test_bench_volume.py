"""The records-volume benchmark (bench/volume.py) keeps working: a tiny run
on SQLite loads its records, times every request beside the same requests
on the small store, the writer with the counters on and off, and the purge,
and finds the counters equal to a scan afterwards; then records written
while no writer ran are folded by the first summary, and again by the
first count. No timing is asserted; the figures at a million rows are in
bench/README.md."""
import json
import re
import subprocess
import sys

import pytest

from bench import volume
from tests.support.endpoint import ROOT, subprocess_env

pytestmark = pytest.mark.slow


def test_a_small_records_volume_run_gives_every_figure(tmp_path):
    out = tmp_path / 'bench.json'
    env = {k: v for k, v in subprocess_env().items() if not k.startswith('KALE_')}
    result = subprocess.run([sys.executable, '-m', 'bench', '--scenarios', 'records-volume',
                             '--runs', '1', '--rows', '2000', '--volume-databases', 'sqlite',
                             '--json', str(out)], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    [configuration] = json.loads(out.read_text())['configurations']
    results = configuration['results']
    for name, _ in volume.REQUESTS:
        figure = results[volume.request_figure('sqlite', name)]
        assert figure['kale']['median'] > 0 and figure['baseline']['median'] > 0
    for mode in ('on', 'off'):
        writer = results[volume.writer_figure('sqlite', mode)]
        assert writer['kale']['median'] > 0 and writer['baseline']['median'] > 0
    deleted, seconds, waited, wrote = volume.purge_figures('sqlite')
    assert 0 < results[deleted]['kale']['median'] < 2000
    assert results[seconds]['kale']['median'] > 0
    assert results[waited]['kale']['median'] >= 0 and results[wrote]['kale']['median'] > 0
    assert 'counters after the purge match a scan: True' in result.stderr
    for name, _ in volume.UNFOLDED_REQUESTS:
        for read in volume.UNFOLDED_READS:
            assert results[volume.unfolded_figure('sqlite', name, read)]['kale']['median'] > 0
        assert re.search(r'%s after 20000 records written in \S+ while no writer ran: 20000 '
                         r'changes waiting, 0 after the first read' % name, result.stderr)
    assert 'Records at volume' in result.stdout
