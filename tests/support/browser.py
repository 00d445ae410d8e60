"""Pages as a person sees them: Debian's Chromium, headless, driven by Selenium through Debian's
chromedriver (installed by `.ci/run`). Every screenshot goes to one folder under the test run's
temporary directory, printed at the end of the run, to be looked at.

Chromium's background services are switched off: this machine's network is closed, and each of
their connection attempts would otherwise be refused, many at a time.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
SCREENSHOTS = Path(os.environ["DUCTILE_TEST_TMP"]) / "screenshots"


def _is_stale(element) -> bool:
    """Whether a page's element has gone with its page. Selenium's own `staleness_of` knows only
    the stale-reference error; Chromium answers a look caught mid-navigation with "Node with given
    id does not belong to the document" instead (CI saw it), which means the same thing."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as error:
        if "does not belong to the document" in (error.msg or ""):
            return True
        raise
    return False


@contextmanager
def served_in_process() -> Iterator[str]:
    """The installed runtime's site over HTTP from this process, its static files served as the
    gateway serves them: by WhiteNoise, from the collection. (pytest-django's `live_server` answers
    /static/ itself, from static/ by unhashed names, so every page asking for hashed ones came out
    unstyled.) Its base URL."""
    from django.test.testcases import LiveServerThread

    # Django types `static_handler` as a handler class; any callable given the application will do.
    server = LiveServerThread("127.0.0.1", static_handler=lambda app: app)  # type: ignore[arg-type]
    server.daemon = True
    server.start()
    server.is_ready.wait()
    if server.error:
        raise server.error
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.terminate()


def browser_available() -> bool:
    return Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()


class Page:
    """One browser window, with the few verbs a page test needs."""

    def __init__(self, driver, base: str):
        self.driver, self.base = driver, base

    def open(self, path: str) -> None:
        self.driver.get(self.base + path)

    def find(self, css: str):
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, css)

    def text_of(self, css: str) -> str:
        """The text of the first element matching `css`, or "" when there is none or it was replaced
        while it was read (a live page re-renders its parts: a wait must look again, not fail)."""
        from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException

        try:
            return str(self.find(css).text)
        except (NoSuchElementException, StaleElementReferenceException):
            return ""

    def find_all(self, css: str) -> list:
        from selenium.webdriver.common.by import By

        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def style(self, css: str, prop: str) -> str:
        return self.driver.execute_script(
            "return getComputedStyle(document.querySelector(arguments[0]))[arguments[1]]", css, prop
        )

    def log_in(self, username: str, password: str) -> None:
        self.open("/admin/login/")
        self.find("#id_username").send_keys(username)
        self.find("#id_password").send_keys(password)
        self.follow(self.find("input[type=submit]"))

    def follow(self, element, timeout: float = 30) -> None:
        """Click something that loads a page, and wait for the new page: until then `find` would
        still see the old one (and a request started meanwhile may race the click's own)."""
        from selenium.webdriver.support.ui import WebDriverWait

        old = self.find("html")
        element.click()
        WebDriverWait(self.driver, timeout).until(lambda _: _is_stale(old))

    def screenshot(self, name: str, *, full: bool = False) -> Path:
        """The window as it is; with `full`, the whole page (the window grown to its height for the
        shot, then put back), for pages longer than a screen."""
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        target = SCREENSHOTS / f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', name)}.png"
        size = self.driver.get_window_size()
        if full:
            height = self.driver.execute_script("return document.documentElement.scrollHeight")
            self.driver.set_window_size(size["width"], min(max(height + 140, size["height"]), 8000))
        try:
            self.driver.save_screenshot(str(target))
        finally:
            if full:
                self.driver.set_window_size(size["width"], size["height"])
        return target

    def theme(self, name: str) -> None:
        """The admin's colour theme ("light", "dark" or "auto"), as its toggle stores it."""
        self.driver.execute_script("localStorage.setItem('theme', arguments[0])", name)
        self.driver.refresh()

    @property
    def text(self) -> str:
        return self.find("body").text


@pytest.fixture
def browser(request, tmp_path) -> Iterator[Page]:
    """A headless Chromium window; `page.base` is set by the test (`browser.base = ...`). When the
    test fails, the page it failed on is saved as `failed-<test>.png` for the person reading why."""
    if not browser_available():
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the browser tests: install chromium and chromium-driver")
        pytest.skip("chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # the tests run as root in CI
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,1000",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(arg)
    # The console's messages, read at the end: a page the Content-Security-Policy broke says so there.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    page = Page(driver, "")
    try:
        yield page
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            _save_failed_page(page, request.node.name)
        else:
            blocked = csp_violations(page)
            assert not blocked, f"the Content-Security-Policy blocked part of a page: {blocked}"
    finally:
        driver.quit()


def csp_violations(page: Page) -> list[str]:
    """What the browser's console says the Content-Security-Policy refused since it was last read
    (gateway/http/csp.py): a script, a style or a connection the page wanted and did not get."""
    return [e["message"] for e in page.driver.get_log("browser") if "Content Security Policy" in e["message"]]


def page_as_text(page: Page, limit: int = 4000) -> str:
    """The page's address, title and visible text, for a failure's report."""
    from selenium.common.exceptions import WebDriverException

    try:
        driver = page.driver
        return f"{driver.current_url}\n{driver.title}\n\n{page.text[:limit]}"
    except WebDriverException as error:
        return f"(the browser could not give its page: {error.msg})"


def _save_failed_page(page: Page, test: str) -> None:
    from selenium.common.exceptions import WebDriverException

    try:
        page.screenshot(f"failed-{test}", full=True)
    except WebDriverException:
        pass  # a browser that cannot draw the page any more is part of the failure already shown
