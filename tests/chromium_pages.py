"""A fresh headless Chromium with one page, for the browser tests (Debian's ``chromium``, driven
by Playwright; never a downloaded browser build)."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import AsyncIterator, Sequence

CHROMIUM = shutil.which("chromium")


@contextlib.asynccontextmanager
async def chromium_page(errors: list[str], args: Sequence[str] = ()) -> AsyncIterator[object]:
    """A fresh headless Chromium (fresh storage) with one page, launched with ``args`` besides
    the usual ones (a fake microphone...); uncaught errors, and anything the page's
    Content-Security-Policy refused, go to ``errors``."""
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--autoplay-policy=no-user-gesture-required",
                *args,
            ],
        )
        try:
            page = await browser.new_page(viewport={"width": 1100, "height": 900})
            page.on("pageerror", lambda error: errors.append(str(error)))
            # The page runs under voicewire_tools/page_headers.py's policy: nothing may be refused.
            page.on(
                "console",
                lambda message: (
                    errors.append(message.text)
                    if "Content Security Policy" in message.text
                    else None
                ),
            )
            yield page
        finally:
            await browser.close()
