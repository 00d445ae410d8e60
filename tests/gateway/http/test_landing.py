"""`/` in-process (issue 36): agents keep the discovery document byte for byte (`*/*`, no Accept,
`application/json`, `?format=json`); a browser's `text/html` gets the landing page, which shows
what `/healthz` shows anyone and the config's fingerprint only to a console login that may read
it, links only to pages that answer, and carries the site's security headers. `/docs/` redirects."""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import urljoin

import pytest
from django.contrib.auth.models import Permission, User
from django.http import HttpResponse
from django.test import Client, override_settings
from django.urls import include, path

from gateway.daemon.config_snapshots import record_config
from gateway.runtime import RUNTIME
from tests.support.browser import served_in_process
from tests.support.runtime import installed_runtime

# Plain reads (the ORM's counts, one config_snapshots row): nothing differs by backend, so SQLite only.
# Real commits: the live server answers the browser from a thread of its own, on its own connection.
pytestmark = pytest.mark.django_db(transaction=True)

# What Chromium and Firefox send for a page.
CHROMIUM = (
    "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,image/apng,*/*;q=0.8,"
    "application/signed-exchange;v=b3;q=0.7"
)
FIREFOX = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
# The discovery document as agents have always read it, byte for byte; only the uptime moves.
DOCUMENT = (
    '{"name":"Ductile Gateway","description":"Lightweight, open-source integration engine for the agentic era.",'
    '"version":"VERSION","uptime_seconds":UPTIME,"discovery":{"health":"/healthz","skills":"/skills",'
    '"plugins":"/plugins","openapi":"/openapi.json","ai_plugin":"/.well-known/ai-plugin.json"}}'
)
PASSWORD = "correct horse battery"

# A urlconf with a user's guide, as the gateway may serve one at /guide/ (this module is its ROOT_URLCONF).
urlpatterns = [
    path("guide/", lambda request: HttpResponse("the guide"), name="guide"),
    path("", include("ductile_site.urls")),
]


@pytest.fixture
def site(config_dir):
    with installed_runtime(config_dir):
        yield Client()


def auditor() -> User:
    """A console login that reads the ledger and its config_snapshots (as the auditor role may)."""
    user = User.objects.create_user("ada", password=PASSWORD, is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="ledger", codename__in=["view_job", "view_configsnapshot"])
    )
    return user


def page(client: Client, path: str = "/", **headers: str) -> str:
    answer = client.get(path, headers={"accept": CHROMIUM, **headers})
    assert answer.status_code == 200, answer.content[:500]
    assert answer["Content-Type"] == "text/html; charset=utf-8"
    return answer.content.decode()


def links(html: str) -> list[str]:
    return [href.replace("&amp;", "&") for href in re.findall(r'href="([^"#]+)"', html)]


@pytest.mark.parametrize(
    "accept",
    [None, "*/*", "application/json", "application/json, text/html", "text/html;q=0.1, application/json"],
)
def test_agents_get_the_discovery_document_byte_for_byte(site, accept):
    from gateway.version import gateway_version

    answer = site.get("/", headers={"accept": accept} if accept else {})
    assert answer.status_code == 200
    assert answer["Content-Type"] == "application/json"
    assert "Accept" in answer["Vary"]  # a cache must not hand a person's page to an agent
    body = re.sub(rb'"uptime_seconds":\d+', b'"uptime_seconds":UPTIME', answer.content).decode()
    assert body == DOCUMENT.replace("VERSION", gateway_version())


@pytest.mark.parametrize("accept", [CHROMIUM, FIREFOX])
def test_format_json_gives_agents_the_document_whatever_they_accept(site, accept):
    answer = site.get("/?format=json", headers={"accept": accept})
    assert answer["Content-Type"] == "application/json"
    assert answer.json()["discovery"]["openapi"] == "/openapi.json"


@pytest.mark.parametrize("accept", [CHROMIUM, FIREFOX])
def test_a_browser_gets_the_landing_page_with_what_healthz_tells_anyone(site, config_dir, accept):
    html = page(site, accept=accept)
    health = site.get("/healthz").json()
    assert "Ductile gateway" in html and "Django REST framework" not in html
    assert re.search(r'id="health-status">ok<', html)
    assert f'id="health-version">{health["version"]}<' in html
    assert f'id="config-dir">{config_dir.path}<' in html
    assert re.search(r'id="health-plugins">\d+<', html)
    # Where to go: the console, the dashboard, the pipelines view, the API's documents.
    for href in ("/admin/", "/dashboard/", "/dashboard/pipelines/", "/docs", "/openapi.json", "/healthz", "/skills"):
        assert href in links(html), href
    assert "/guide/" not in links(html)  # no guide is served here: no link to a 404
    # Anonymous: nothing /healthz does not tell; which config it is takes a console login.
    assert "blake3:" not in html and 'id="config-login"' in html


def test_the_page_carries_the_sites_security_headers_and_no_script_of_its_own(site):
    answer = site.get("/", headers={"accept": CHROMIUM})
    assert answer["X-Frame-Options"] == "DENY"
    assert answer["X-Content-Type-Options"] == "nosniff"
    csp = answer["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp and "'unsafe-inline'" not in csp
    html = answer.content.decode()
    # The admin's own theme script only; no inline script, no file from elsewhere.
    (script,) = re.findall(r"<script[^>]*>", html)
    assert re.fullmatch(r'<script src="/static/admin/js/theme(\.[0-9a-f]+)?\.js">', script), script
    assert not re.search(r'(src|href)="(https?:)?//', html)


def test_every_link_on_the_page_answers_or_asks_for_a_login(site):
    html = page(site)
    followed = {}
    for href in sorted(set(links(html))):
        target = urljoin("/", href)
        answer = site.get(target)
        followed[target] = answer.status_code
        if answer.status_code == 302:
            assert answer["Location"].startswith("/admin/login/"), (target, answer["Location"])
        else:
            assert answer.status_code == 200, (target, answer.status_code)
    assert followed["/admin/"] == 302 and followed["/docs"] == 200 and followed["/healthz"] == 200


def test_the_guide_is_linked_when_the_gateway_serves_it(site):
    with override_settings(ROOT_URLCONF=__name__):
        html = page(site)
        assert "/guide/" in links(html)
        assert site.get("/guide/").status_code == 200


def test_a_console_login_that_may_read_config_snapshots_sees_the_configs_fingerprint(site):
    record_config(RUNTIME.get(), "start")  # as `system start` records the config it loads
    site.force_login(auditor())
    html = page(site)
    fingerprint = re.search(r'id="config-fingerprint" href="([^"]+)">(blake3:[0-9a-f]{64})<', html)
    assert fingerprint is not None, html
    row = site.get(fingerprint.group(1))
    assert row.status_code == 200 and fingerprint.group(2) in row.content.decode()
    assert "/admin/config/" in links(html)
    # And back: the console's "View site" is this page.
    assert re.search(r'<a href="/">View site</a>', site.get("/admin/").content.decode())
    # A login without that permission sees no more than anyone.
    other = Client()
    other.force_login(User.objects.create_user("bob", password=PASSWORD, is_staff=True))
    assert "blake3:" not in page(other)


def test_when_the_config_does_not_load_the_page_says_why_as_healthz_does(config_dir):
    config_dir.service["max_workers"] = 0
    config_dir.write()
    previous = (RUNTIME._current, RUNTIME.error, RUNTIME.config_dir)
    RUNTIME._current = None
    RUNTIME.load(config_dir.path)
    try:
        client = Client()
        html = page(client)
        refusal = client.get("/healthz").json()["error"]
        assert 'id="health-status">unavailable<' in html
        assert "service.max_workers" in refusal and refusal.replace("'", "&#x27;") in html
        assert client.get("/").json()["discovery"]["health"] == "/healthz"  # agents unaffected
    finally:
        RUNTIME._current, RUNTIME.error, RUNTIME.config_dir = previous


def test_a_refused_token_is_json_even_for_a_browser(site):
    answer = site.get("/", headers={"accept": CHROMIUM, "authorization": "Basic eDp5"})
    assert answer.status_code == 401 and answer["Content-Type"] == "application/json"
    assert "Bearer" in answer.json()["error"]


@pytest.mark.parametrize(("asked", "canonical"), [("/docs/", "/docs"), ("/docs//?x=1", "/docs?x=1")])
def test_docs_with_a_trailing_slash_redirects_to_the_docs(site, asked, canonical):
    answer = site.get(asked)
    assert answer.status_code == 301 and answer["Location"] == canonical
    assert site.get(canonical).status_code == 200


# -- in Chromium ----------------------------------------------------------------------------------


@pytest.fixture
def served(site) -> Iterator[str]:
    with served_in_process() as base:
        yield base


def test_the_page_in_a_browser_wide_and_on_a_phone(served, browser):
    """Styled by the console's served stylesheets, light and dark; on a 390 px phone nothing is cut
    or scrolls sideways; without JavaScript, whole; logged in, the config's fingerprint.
    Screenshots: landing-light, landing-dark, landing-narrow and landing-console-login
    (docs/screenshots/landing.png and landing-narrow.png)."""
    browser.base = served
    browser.open("/")
    browser.theme("light")
    assert browser.style("#header", "backgroundColor") not in ("rgba(0, 0, 0, 0)", "")
    assert browser.style(".landing", "display") == "grid"  # landing.css, served
    assert browser.find("#health-status").text == "ok"
    assert browser.find("#config-dir").text == str(RUNTIME.get().config.config_dir)
    browser.screenshot("landing-light", full=True)
    browser.theme("dark")  # the admin's dark colours, which the cards take from its variables
    assert browser.style(".dash-card", "backgroundColor") != "rgb(255, 255, 255)"
    browser.screenshot("landing-dark", full=True)
    browser.theme("light")
    browser.driver.set_window_size(390, 844)
    width = browser.driver.execute_script("return document.documentElement.scrollWidth")
    assert width <= 390, f"the page is {width} px wide on a 390 px phone"
    assert browser.find("#agent-links").is_displayed()
    browser.screenshot("landing-narrow", full=True)
    # Without JavaScript: the same page, styled, whole (only the theme toggle needs a script).
    assert browser.find("html").get_dom_attribute("data-theme") == "light"  # set by theme.js
    browser.driver.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": True})
    browser.open("/")
    assert browser.find("html").get_dom_attribute("data-theme") is None  # theme.js did not run
    assert browser.style(".landing", "display") == "grid"
    assert browser.find("#health-status").text == "ok" and browser.find("#agent-links").is_displayed()
    browser.driver.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": False})
    # A person's way on: the API docs, through the link.
    browser.driver.set_window_size(1400, 1000)
    browser.follow(browser.find("#agent-links a[href='/docs']"))
    assert browser.driver.current_url == served + "/docs"
    # Logged in to the console with a role that reads the ledger: which config this is, linked.
    record_config(RUNTIME.get(), "start")
    auditor()
    browser.log_in("ada", PASSWORD)
    browser.open("/")
    assert browser.find("#config-fingerprint").text.startswith("blake3:")
    assert "WELCOME, ADA" in browser.find("#user-tools").text.upper()
    browser.screenshot("landing-console-login", full=True)
