"""`ductile admin list-users|disable-user|enable-user|remove-user|unlock` against the accounts a
running gateway's console logs in: what each prints, what each changes for a person at the login
page (over HTTP, with its CSRF token, as a browser posts it), and the exit codes (0 done or already
so, 1 for a name with no account, as `job inspect` of an unknown id)."""

from __future__ import annotations

import http.cookiejar
import re
import urllib.error
import urllib.parse
import urllib.request

import pytest

from tests.support.config_dirs import ConfigDir
from tests.support.live_api import live_api
from tests.support.processes import ductile, ductile_json

PASSWORD = "correct horse battery"


class Browser:
    """Cookies, the CSRF token and no redirects followed: what /admin/login/ answers, as it answers it."""

    def __init__(self, base: str):
        self.base = base
        self.cookies = http.cookiejar.CookieJar()

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None

        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.cookies), NoRedirect)

    def request(self, path: str, form: dict[str, str] | None = None) -> tuple[int, str, str]:
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        request = urllib.request.Request(self.base + path, data=data, headers={"Referer": self.base + path})
        try:
            with self.opener.open(request, timeout=30) as response:
                return response.status, response.headers.get("Location", ""), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers.get("Location", ""), exc.read().decode()

    def log_in(self, username: str, password: str) -> tuple[int, str, str]:
        _, _, page = self.request("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert token, page[:500]
        return self.request(
            "/admin/login/", {"csrfmiddlewaretoken": token[1], "username": username, "password": password}
        )

    def in_console(self) -> bool:
        return self.request("/admin/")[0] == 200


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    cfg = ConfigDir(tmp_path_factory.mktemp("accounts") / "config")
    with live_api(cfg, [{"name": "admin", "token": "tok-admin", "scopes": ["*"]}]) as live:
        for name, role in (("ada", "auditor"), ("olga", "operator")):
            made = ductile(cfg, "admin", "create-user", name, "--role", role, "--password-stdin", input=PASSWORD)
            assert made.returncode == 0, made.stderr
        yield cfg, live


def users(cfg: ConfigDir) -> dict[str, dict]:
    code, body = ductile_json(cfg, "admin", "list-users")
    assert code == 0, body
    return {user["username"]: user for user in body["users"]}


def test_list_users_shows_roles_activity_and_last_login(gateway):
    cfg, live = gateway
    listed = users(cfg)
    assert listed["ada"]["roles"] == ["auditor"] and listed["olga"]["roles"] == ["operator"]
    assert listed["ada"]["active"] is True and listed["ada"]["locked_out"] is False
    assert listed["olga"]["last_login"] is None
    assert Browser(f"http://127.0.0.1:{live.port}").log_in("olga", PASSWORD)[0] == 302
    assert users(cfg)["olga"]["last_login"].endswith("Z")
    text = ductile(cfg, "admin", "list-users")
    assert text.returncode == 0
    assert re.search(r"^ada +auditor +active +last login never$", text.stdout, re.M), text.stdout
    assert re.search(r"^olga +operator +active +last login 20\d\d-", text.stdout, re.M), text.stdout


def test_too_many_failed_logins_lock_out_and_unlock_lifts_it(gateway):
    cfg, live = gateway
    browser = Browser(f"http://127.0.0.1:{live.port}")
    codes = [browser.log_in("ada", f"wrong-{n}")[0] for n in range(5)]
    assert codes == [200, 200, 200, 200, 429]
    status, _, page = browser.log_in("ada", PASSWORD)
    assert status == 429 and "Too many failed logins" in page and not browser.in_console()
    live.output.wait_for('"username": "ada", "client_ip": "127.0.0.1", "failures": 6, "locked_out": true')
    locked = users(cfg)["ada"]
    assert locked["locked_out"] is True
    [lockout] = locked["lockouts"]
    assert lockout["address"] == "127.0.0.1" and lockout["failures"] == 6 and lockout["until"].endswith("Z")
    assert "locked out from 127.0.0.1 until" in ductile(cfg, "admin", "list-users").stdout
    lifted = ductile(cfg, "admin", "unlock", "ada")
    assert lifted.returncode == 0 and "unlocked ada: it may log in again" in lifted.stdout, lifted.stderr
    assert users(cfg)["ada"]["locked_out"] is False
    assert browser.log_in("ada", PASSWORD)[0] == 302 and browser.in_console()
    again = ductile(cfg, "admin", "unlock", "ada")
    assert again.returncode == 0 and "ada was not locked out" in again.stdout


def test_a_disabled_account_cannot_log_in_and_its_session_ends(gateway):
    cfg, live = gateway
    inside = Browser(f"http://127.0.0.1:{live.port}")
    assert inside.log_in("olga", PASSWORD)[0] == 302 and inside.in_console()
    code, body = ductile_json(cfg, "admin", "disable-user", "olga")
    assert code == 0 and body == {"username": "olga", "active": False, "changed": True}
    assert not inside.in_console()  # its open session ended
    status, _, page = Browser(f"http://127.0.0.1:{live.port}").log_in("olga", PASSWORD)
    assert status == 200 and "Please enter the correct username and password" in page
    assert users(cfg)["olga"]["active"] is False
    assert "disabled" in ductile(cfg, "admin", "list-users").stdout
    twice = ductile(cfg, "admin", "disable-user", "olga")
    assert twice.returncode == 0 and "olga was disabled already" in twice.stdout
    enabled = ductile(cfg, "admin", "enable-user", "olga")
    assert enabled.returncode == 0 and "enabled olga" in enabled.stdout
    assert Browser(f"http://127.0.0.1:{live.port}").log_in("olga", PASSWORD)[0] == 302


def test_remove_user_deletes_the_account_and_unknown_names_exit_as_other_not_founds(gateway):
    cfg, live = gateway
    made = ductile(cfg, "admin", "create-user", "temp", "--role", "auditor", "--password-stdin", input=PASSWORD)
    assert made.returncode == 0
    removed = ductile(cfg, "admin", "remove-user", "temp")
    assert removed.returncode == 0 and "removed temp" in removed.stdout
    assert "temp" not in users(cfg)
    assert Browser(f"http://127.0.0.1:{live.port}").log_in("temp", PASSWORD)[0] == 200
    # Failed logins of a name with no account can still be cleared.
    assert "temp was not locked out; its failed logins count 0 again" in ductile(cfg, "admin", "unlock", "temp").stdout
    not_found = ductile(cfg, "job", "inspect", "no-such-job").returncode
    assert not_found == 1
    for verb, name in (
        ("remove-user", "temp"),
        ("disable-user", "temp"),
        ("enable-user", "temp"),
        ("unlock", "nobody"),
    ):
        proc = ductile(cfg, "admin", verb, name)
        assert proc.returncode == not_found, (verb, proc.stdout, proc.stderr)
        assert f"'{name}'" in proc.stderr and "Traceback" not in proc.stderr
    code, body = ductile_json(cfg, "admin", "remove-user", "temp")
    assert code == not_found and body["exit_code"] == not_found
    assert body["error"] == "no console account named 'temp' (`ductile admin list-users` lists them)"
