"""Take the README's screenshot of a running dashboard:

    make demo WEB=1            # prints the dashboard's URL and keeps serving
    python -m tests.support.screenshot http://127.0.0.1:PORT/ docs/dashboard.png
"""
from __future__ import annotations

import sys

from tests.support.browser import find_chromium


def screenshot(url: str, path: str) -> None:
    from playwright.sync_api import sync_playwright
    chromium = find_chromium()
    if chromium is None:
        raise SystemExit('no Chromium found: apt-get install chromium')
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True,
                                             args=['--no-sandbox', '--disable-gpu'])
        page = browser.new_page(viewport={'width': 1280, 'height': 900})
        page.goto(url)
        page.wait_for_selector('body[data-loaded=true]', timeout=15000)
        page.wait_for_selector('#queues tbody tr')
        page.screenshot(path=path, full_page=True)
        browser.close()


if __name__ == '__main__':
    screenshot(sys.argv[1], sys.argv[2])
