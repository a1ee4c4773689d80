"""A real headless Chromium (Debian's, driven by Playwright) against the real stack."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.layers import needs_layer

CHROMIUM = Path("/usr/bin/chromium")
# No sandbox: the tests run as root in a container. The rest keeps Chromium from calling home.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

HERE = Path(__file__).resolve().parent
# The browser tests need Debian's chromium (scripts/setup.sh installs it); the stream's API
# tests in this folder need no browser and still run. Without it the browser tests skip,
# saying so, or fail under RFT_REQUIRE_ALL_LAYERS=1 (CI: tests/layers.py).
NEEDS_CHROMIUM = needs_layer(
    CHROMIUM.exists(), f"needs Debian's chromium at {CHROMIUM} (bash scripts/setup.sh)"
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        uses_browser = {"browser", "page"} & set(getattr(item, "fixturenames", ()))
        if HERE in item.path.parents and uses_browser:
            item.add_marker(NEEDS_CHROMIUM)


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    # A fresh context per test: its own localStorage, so no key leaks between tests.
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(20_000)
    opened = context.new_page()
    yield opened
    context.close()
