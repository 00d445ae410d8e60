"""The console's door through Django's test client: a username locked out from an address after
too many failed logins (and told why and until when), every failure recorded in the console and
as a JSON log line, the lockout read by both roles and lifted by an operator only, the client's
address from the connection unless a trusted proxy says otherwise, and where a login lands."""

from __future__ import annotations

import io
import json
import logging
import re

import pytest
from axes.models import AccessAttempt, AccessFailureLog
from django.test import Client
from django.urls import reverse

from gateway.logs import JsonFormatter
from gateway.operations.accounts import lockouts, save_account
from tests.support.console_setup import console_roles

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

PASSWORD = "correct horse battery"
LOGIN = "/admin/login/"


@pytest.fixture
def accounts(runtime):
    console_roles()
    save_account("ada", "auditor", PASSWORD)
    save_account("olga", "operator", PASSWORD)


@pytest.fixture
def log_lines():
    """The console's log lines, as the gateway writes them (JSON)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    console = logging.getLogger("ductile.console")
    console.addHandler(handler)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    console.removeHandler(handler)


def log_in(client, username, password, **extra):
    return client.post(LOGIN, {"username": username, "password": password}, **extra)


def logged_in(client):
    return client.get(reverse("admin:index")).status_code == 200


def test_a_login_without_next_lands_on_the_console(accounts):
    client = Client()
    response = log_in(client, "ada", PASSWORD)
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:index")  # was /accounts/profile/, a 404
    assert client.get(response["Location"]).status_code == 200
    # With a `next`, there.
    again = Client().post(LOGIN, {"username": "ada", "password": PASSWORD, "next": "/admin/ledger/job/"})
    assert again["Location"] == "/admin/ledger/job/"


def test_five_wrong_passwords_lock_the_name_out_from_that_address_and_say_until_when(accounts, log_lines, settings):
    attacker = Client()
    for attempt in range(1, settings.AXES_FAILURE_LIMIT):
        wrong = log_in(attacker, "ada", f"guess-{attempt}")
        assert wrong.status_code == 200 and "Please enter the correct username and password" in wrong.content.decode()
    locking = log_in(attacker, "ada", "guess-5")
    assert locking.status_code == 429
    page = locking.content.decode()
    assert 'id="lockout"' in page and "Too many failed logins for “ada”" in page
    assert "refused for 15 minutes, until " in page and "ductile admin unlock ada" in page
    # Now even the right password is refused from there, without being checked.
    refused = log_in(attacker, "ada", PASSWORD)
    assert refused.status_code == 429 and not logged_in(attacker)
    # The same person from another address, and another name from this one, are not locked out.
    elsewhere = Client(REMOTE_ADDR="10.0.0.7")
    assert log_in(elsewhere, "ada", PASSWORD).status_code == 302 and logged_in(elsewhere)
    assert log_in(Client(), "olga", PASSWORD).status_code == 302
    # Every failure is a record the console lists and one JSON line in the log.
    assert AccessFailureLog.objects.filter(username="ada", ip_address="127.0.0.1").count() == 6
    assert (
        list(AccessFailureLog.objects.order_by("id").values_list("locked_out", flat=True)) == [False] * 4 + [True] * 2
    )
    lines = [line for line in log_lines() if line.get("username") == "ada"]
    assert len(lines) == 6
    assert lines[0]["level"] == "WARNING" and lines[0]["component"] == "console"
    assert lines[0]["client_ip"] == "127.0.0.1" and lines[0]["failures"] == 1 and lines[0]["locked_out"] is False
    assert "4 more before a lockout" in lines[0]["message"]
    assert lines[4]["locked_out"] is True and "locked out for 15 minutes" in lines[4]["message"]
    assert PASSWORD not in json.dumps(lines) and PASSWORD not in "".join(
        AccessAttempt.objects.values_list("post_data", flat=True)
    )
    [held] = lockouts(AccessAttempt.objects.get().attempt_time)
    assert (held.username, held.address, held.failures) == ("ada", "127.0.0.1", 6)


def test_a_forwarded_for_header_is_believed_only_from_a_trusted_proxy(accounts, settings):
    # No trusted proxy: the header is the client's own words, and changing it changes nothing.
    for attempt in range(settings.AXES_FAILURE_LIMIT):
        log_in(Client(HTTP_X_FORWARDED_FOR=f"198.51.100.{attempt}"), "ada", "wrong")
    assert set(AccessFailureLog.objects.values_list("ip_address", flat=True)) == {"127.0.0.1"}
    assert log_in(Client(HTTP_X_FORWARDED_FOR="198.51.100.99"), "ada", PASSWORD).status_code == 429
    # Behind a trusted proxy (127.0.0.1 here), the last address it did not add is the client's.
    settings.TRUSTED_PROXIES = ["127.0.0.0/8", "10.0.0.1"]
    proxied = Client(HTTP_X_FORWARDED_FOR="203.0.113.9, 192.0.2.4, 10.0.0.1")
    assert log_in(proxied, "olga", "wrong").status_code == 200
    assert AccessFailureLog.objects.get(username="olga").ip_address == "192.0.2.4"
    # A client of the proxy is not the proxy: ada may log in through it.
    assert log_in(Client(HTTP_X_FORWARDED_FOR="192.0.2.4"), "ada", PASSWORD).status_code == 302


def test_both_roles_read_the_lockouts_and_failures_and_only_an_operator_unlocks(accounts, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT):
        log_in(Client(), "ada", "wrong")
    auditor, operator = Client(REMOTE_ADDR="10.0.0.2"), Client(REMOTE_ADDR="10.0.0.3")
    assert log_in(auditor, "ada", PASSWORD).status_code == 302
    assert log_in(operator, "olga", PASSWORD).status_code == 302
    index = auditor.get(reverse("admin:index")).content.decode()
    figures = dict(re.findall(r'href="([^"]+)">\s*<span class="ductile-figure-value">([^<]+)</span>', index))
    assert figures["/admin/axes/accessattempt/?locked=yes"] == "1"
    assert "Logins" in index
    locked = auditor.get("/admin/axes/accessattempt/?locked=yes").content.decode()
    assert "locked out</span> until" in locked and "127.0.0.1" in locked
    failures = auditor.get(reverse("admin:axes_accessfailurelog_changelist")).content.decode()
    assert failures.count("127.0.0.1") == settings.AXES_FAILURE_LIMIT
    # Never counted, as the ledger's lists: the rows shown, not the admin's "N results (Show all)".
    assert f"{settings.AXES_FAILURE_LIMIT} access failures" in failures and "Show all" not in failures
    assert auditor.get(reverse("admin:axes_accesslog_changelist")).status_code == 200
    attempt = AccessAttempt.objects.get()
    act = reverse("admin:axes_accessattempt_act", args=[attempt.pk, "unlock"])
    assert auditor.post(act, {"confirm": "yes"}).status_code == 403
    assert lockouts(attempt.attempt_time)
    assert "Unlock" not in auditor.get(reverse("admin:axes_accessattempt_change", args=[attempt.pk])).content.decode()
    confirm = operator.get(act).content.decode()
    assert "are you sure?" in confirm and "count 0 again" in confirm
    done = operator.post(act, {"confirm": "yes"}, follow=True)
    assert "unlocked: ada may log in from 127.0.0.1 again" in done.content.decode()
    assert not lockouts(attempt.attempt_time)
    back = Client()
    assert log_in(back, "ada", PASSWORD).status_code == 302 and logged_in(back)
    # Who unlocked is in the console's trail.
    trail = operator.get(reverse("admin:admin_logentry_changelist")).content.decode()
    assert "olga" in trail and "unlocked" in trail
