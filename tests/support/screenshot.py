"""Take the README's screenshots of a running dashboard:

    make demo WEB=1            # prints the dashboard's URL and keeps serving
    python -m tests.support.screenshot http://127.0.0.1:PORT/ docs/dashboard.png

writes docs/dashboard.png (the overview at 1366 px) and, beside it,
dashboard-task.png (the first failed task's view), dashboard-queues.png and
dashboard-phone.png (the overview at a phone's 390 px).
"""
from __future__ import annotations

import os
import sys

from tests.support.browser import find_chromium


def _open(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector('body[data-loaded=true]', timeout=15000)
    page.wait_for_timeout(300)          # the charts' first frame


def screenshot(url: str, path: str) -> None:
    from playwright.sync_api import sync_playwright
    chromium = find_chromium()
    if chromium is None:
        raise SystemExit('no Chromium found: apt-get install chromium')
    base, extension = os.path.splitext(path)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True,
                                             args=['--no-sandbox', '--disable-gpu'])
        page = browser.new_page(viewport={'width': 1366, 'height': 900})
        _open(page, url + '#/')
        page.screenshot(path=path, full_page=True)
        _open(page, url + '#/tasks?status=failed')
        first = page.get_attribute('#tasks tbody tr[data-id]', 'data-id')
        if first:
            _open(page, url + '#/tasks/' + first)
            page.screenshot(path=base + '-task' + extension, full_page=True)
        _open(page, url + '#/queues')
        page.screenshot(path=base + '-queues' + extension, full_page=True)
        phone = browser.new_page(viewport={'width': 390, 'height': 844})
        _open(phone, url + '#/')
        phone.screenshot(path=base + '-phone' + extension, full_page=True)
        browser.close()


if __name__ == '__main__':
    screenshot(sys.argv[1], sys.argv[2])
