"""The browser page, driven in Debian's Chromium by Playwright: connect, ask, hear the answer."""

from __future__ import annotations

import shutil

from required_tools import needs

CHROMIUM = shutil.which("chromium")
pytestmark = needs("chromium")


async def test_the_page_asks_and_schedules_the_answers_audio(stack):
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--autoplay-policy=no-user-gesture-required",
            ],
        )
        try:
            page = await browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            await page.goto(f"{stack.base_url}/")
            assert await page.input_value("#url") == stack.ws_url  # defaults to its own /ws
            await page.click("#connect")
            await page.wait_for_function(
                "document.getElementById('status').textContent === 'connected'"
            )
            # The page asks for the voices on connect and offers them, the default selected.
            await page.wait_for_function("document.querySelectorAll('#voice option').length > 50")
            assert await page.input_value("#voice") == "af_heart"
            british = await page.eval_on_selector(
                "#voice optgroup[label='British English']", "g => g.children.length"
            )
            assert british == 8
            await page.fill("#prompt", "Hello, who are you?")
            await page.click("#ask")
            await page.wait_for_function(
                "document.getElementById('log').textContent.includes('turn_end')", timeout=120_000
            )
            log = await page.inner_text("#log")
            status = await page.inner_text("#status")
        finally:
            await browser.close()
    assert errors == []
    assert "first audio frame" in log and '"Hello!"' in log
    scheduled = float(status.split(", ")[1].split(" s ")[0])
    assert scheduled > 2.0  # the answer's audio went to the speakers, not just the log
