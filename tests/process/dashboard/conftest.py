"""The dashboard in a real browser: Debian's Chromium driven by Playwright, against a real stack
(echo model, Membridge, a keyed runtime on SQLite and a worker running the real Claude CLI),
one for the whole package so that the browser tests stay within their time budget.

On a failure the page's screenshot is written to `test-artifacts/` (or `$BLOOM_TEST_ARTIFACTS`).
"""

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright

from tests.support.required import unavailable
from tests.support.stack import Stack

ADMIN_KEY = "browser-admin-key-0123456789abcdef"
PASSWORD = "correct horse battery staple"
USERS = {"ada": "admin", "vera": "viewer", "pat": "approver"}
ARTIFACTS = Path(os.environ.get("BLOOM_TEST_ARTIFACTS", "test-artifacts"))


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory, claude: Path) -> Iterator[Stack]:
    data_dir = tmp_path_factory.mktemp("dashboard")
    built = Stack(f"sqlite:///{data_dir}/runtime.db", data_dir, claude, admin_key=ADMIN_KEY)
    built.start()
    for name, role in USERS.items():
        made = subprocess.run(
            [sys.executable, "-m", "bloom.cli.main", "user", "create", name, "--role", role,
             "--password-stdin"],
            input=PASSWORD,
            env={**os.environ, "DATABASE_URL": built.database_url, "BLOOM_DATA_DIR": str(data_dir)},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
    built.add_worker("w1")
    yield built
    built.close()


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    executable = chromium_path()
    if executable is None:
        unavailable("Chromium is not installed (apt-get install chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, headless=True)
        yield launched
        launched.close()


FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[FAILED] = report.failed
    return report


class Pages:
    """The pages a test opens, each in a browser context of its own, with every Content-Security-
    Policy violation they report."""

    def __init__(self, browser: Browser, base: str):
        self.browser = browser
        self.base = base
        self.opened: list[Page] = []
        self.violations: list[str] = []

    def open(self, **context_options: Any) -> Page:
        page = self.browser.new_context(**context_options).new_page()
        page.set_default_timeout(20_000)
        page.on("console", self._console)
        self.opened.append(page)
        return page

    def _console(self, message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text:
            self.violations.append(message.text)

    def logged_in(self, user: str, then: str = "/", **context_options: Any) -> Page:
        """A page logged in as `user` through the login form, at `then`."""
        page = self.open(**context_options)
        page.goto(self.base + then)
        assert "/login" in page.url  # every page sends a stranger to the login first
        page.get_by_label("User").fill(user)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(self.base + then)
        return page


@pytest.fixture
def pages(browser: Browser, stack: Stack, request: pytest.FixtureRequest) -> Iterator[Pages]:
    """Screenshots of a failed test's pages; no test may cause a CSP violation."""
    held = Pages(browser, stack.runtime.url)
    yield held
    if request.node.stash.get(FAILED, False):
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^\w.-]+", "_", request.node.name)
        for n, page in enumerate(held.opened):
            page.screenshot(path=str(ARTIFACTS / f"{name}-{n}.png"), full_page=True)
    for page in held.opened:
        page.context.close()
    assert held.violations == []
