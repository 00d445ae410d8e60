"""The audit console in a real browser, served by `system start` as a person reaches it: the
login page styled by the stylesheets the gateway itself serves, a role's account logging in."""

from __future__ import annotations

import pytest

from tests.live_api import live_api
from tests.support import ductile

pytestmark = pytest.mark.slow

PASSWORD = "correct horse battery"


def test_an_auditor_logs_in_to_a_styled_console(config_dir, browser):
    with live_api(config_dir, [{"name": "admin", "token": "tok", "scopes": ["*"]}]) as served:
        made = ductile(
            config_dir, "admin", "create-user", "ada", "--role", "auditor", "--password-stdin", input=PASSWORD
        )
        assert made.returncode == 0, made.stderr
        browser.base = f"http://127.0.0.1:{served.port}"
        browser.open("/admin/login/")
        # Styled: the admin's header colour and our own branding, both from served stylesheets.
        assert browser.style("#header", "backgroundColor") not in ("rgba(0, 0, 0, 0)", "")
        assert browser.style("#site-name", "display") == "flex"
        assert "ductile admin create-user" in browser.text
        browser.screenshot("console-login")
        browser.log_in("ada", PASSWORD)
        assert browser.find("#site-name a").text == "Ductile"
        assert "WELCOME, ADA" in browser.find("#user-tools").text.upper()
        assert browser.find("a[href='/admin/ledger/job/']").text  # the ledger, readable by an auditor
        browser.screenshot("console-index-auditor")
