"""A fresh headless Chromium with one page, for the browser tests (Debian's ``chromium``, driven
by Playwright; never a downloaded browser build), and the ways those tests read the page
(``tests/browser/``, and the page's runs against the AgentCore app and the base64 stack)."""

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


TURN = 120_000  # ms: a turn's wait, generous for a loaded 2-core machine
STATE = "document.getElementById('status').dataset.state"
STATS = "() => ({...window.voicewireStats})"


def watch_loads(page) -> list[str]:
    """What went wrong loading, as a browser's console would show it: console errors, requests
    that failed, answers of 400 and over (a 404 for config.json was one on every load)."""
    problems: list[str] = []
    page.on(
        "console",
        lambda message: (
            problems.append(f"console: {message.text}") if message.type == "error" else None
        ),
    )
    page.on("requestfailed", lambda request: problems.append(f"failed: {request.url}"))
    page.on(
        "response",
        lambda response: (
            problems.append(f"{response.status}: {response.url}")
            if response.status >= 400
            else None
        ),
    )
    return problems


# Every state the status line takes, in order, from the page's first moment: an init script
# runs outside the page's Content-Security-Policy.
RECORD_STATES = """
    window.statesSeen = [];
    new MutationObserver(() => {
        const status = document.getElementById('status');
        if (status && status.dataset.state !== window.statesSeen.at(-1)) {
            window.statesSeen.push(status.dataset.state);
        }
    }).observe(document, {subtree: true, attributes: true, attributeFilter: ['data-state']});
"""


async def until(page, expression: str, within_ms: float = 30_000) -> None:
    """Until a JavaScript expression is true. As a function, not a string to evaluate: the
    page's Content-Security-Policy forbids eval, and Playwright would eval a bare string."""
    await page.wait_for_function(f"() => ({expression})", timeout=within_ms)


async def connect(page, url: str | None = None, token: str | None = None) -> None:
    if url is not None:
        await page.fill("#url", url)
    if token is not None:
        await page.fill("#token", token)
    await page.click("#connect")


async def wait_open(page) -> None:
    await until(page, f"{STATE} === 'open'")


async def wait_turn(page, row: int, status: str = "complete") -> None:
    """Until history row `row` (1-based) has its turn_end with this status."""
    await until(
        page,
        f"document.querySelector('#history tbody tr:nth-child({row})')?.dataset.status"
        f" === '{status}'",
        within_ms=TURN,
    )
