"""A real headless Chromium for the report's tests, driven by Playwright.

The browser is Debian's ``chromium`` (``scripts/setup.sh`` installs it); Playwright never
downloads one here. Outside the test tier a missing browser skips the browser tests with the
reason; with ``MODAL_EVAL_REQUIRE_BROWSER=1`` (``scripts/test.sh`` sets it) it fails them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

REQUIRE_ENV = "MODAL_EVAL_REQUIRE_BROWSER"
CHROMIUM_ENV = "MODAL_EVAL_CHROMIUM"


def chromium_path() -> str | None:
    return (
        os.environ.get(CHROMIUM_ENV) or shutil.which("chromium") or shutil.which("chromium-browser")
    )


def missing(reason: str) -> None:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1: the browser tests must run here)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium (``playwright.sync_api.Browser``), shared by one test module.

    Not by the session: while Playwright's sync API is open its event loop counts as running
    in this thread, and every later test that calls ``asyncio.run`` would fail.
    """
    executable = chromium_path()
    if executable is None:
        missing("no chromium binary: apt-get install -y chromium (scripts/setup.sh does)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("playwright is not installed: uv sync (it is a dev dependency)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))

    def offline(route: Any) -> None:
        # The report is self-contained: any request leaving the file is a failure.
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            errors.append(f"network request to {route.request.url}")
            route.abort()

    context.route("**/*", offline)
    yield opened
    context.close()
    assert not errors, f"the page reported errors: {errors}"
