"""Fixtures the end-to-end modules share."""
from __future__ import annotations

import pytest

from tests.support.browser import find_chromium


@pytest.fixture(scope='session')
def browser():
    """One headless Chromium for the whole session (one Playwright per
    process: a second one in the same thread cannot start)."""
    chromium = find_chromium()
    if chromium is None:
        pytest.skip('no Chromium found (apt-get install chromium): the dashboard tests need one')
    sync_api = pytest.importorskip('playwright.sync_api')
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, headless=True,
                                              args=['--no-sandbox', '--disable-gpu'])
        yield launched
        launched.close()
