"""Headless Chromium for the dashboard's tests: Debian's `chromium`, driven
by Playwright with the system executable (Playwright's own browser
downloads are not used)."""
from __future__ import annotations

import shutil
from typing import Optional

CANDIDATES = ('chromium', 'chromium-browser', 'google-chrome', 'google-chrome-stable')


def find_chromium() -> Optional[str]:
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None
