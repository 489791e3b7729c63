"""Fixtures the end-to-end modules share."""
from __future__ import annotations

import pytest

from bench.servers import BenchError, Fauxqs
from tests.support.browser import find_chromium
from tests.support.unavailable import require_module, unavailable


@pytest.fixture
def fauxqs_installed():
    """fauxqs installed and able to start; skips (fails in CI) saying why when
    it cannot be installed (npm) or started here."""
    server = Fauxqs()
    try:
        server.start()
    except BenchError as exc:
        unavailable('fauxqs is not available: %s' % exc)
    finally:
        server.stop()


@pytest.fixture(scope='session')
def browser():
    """One headless Chromium for the whole session (one Playwright per
    process: a second one in the same thread cannot start)."""
    chromium = find_chromium()
    if chromium is None:
        unavailable('no Chromium found (apt-get install chromium): the dashboard tests need one')
    sync_api = require_module('playwright.sync_api', 'the dashboard tests drive Chromium with it')
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, headless=True,
                                              args=['--no-sandbox', '--disable-gpu'])
        yield launched
        launched.close()
