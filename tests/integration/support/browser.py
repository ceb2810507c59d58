"""A real Chromium (Debian's ``chromium`` package) driven by Playwright, for tests of the page.

Never a downloaded browser build: ``executable_path`` is the system's
Chromium, which ``tools/install_system_packages.sh`` installs. Each use gets
a fresh profile directory and no network beyond what the page itself asks.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import AsyncIterator
from typing import Any, Final

CHROMIUM: Final[str] = "/usr/bin/chromium"

FLAGS: Final[tuple[str, ...]] = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)

VIEWPORT: Final[dict[str, int]] = {"width": 1440, "height": 900}
"""A laptop screen."""


@contextlib.asynccontextmanager
async def chromium_page(profile: pathlib.Path) -> AsyncIterator[Any]:
    """A page in a fresh headless Chromium; the browser and Playwright's driver end on exit."""
    assert os.access(CHROMIUM, os.X_OK), f"{CHROMIUM} missing: run tools/install_system_packages.sh"
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=list(FLAGS),
            viewport=VIEWPORT,
        )
        try:
            page = context.pages[0] if context.pages else await context.new_page()
            yield page
        finally:
            await context.close()
