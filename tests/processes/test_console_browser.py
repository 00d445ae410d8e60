"""The audit console in a real browser, served by `system start` as a person reaches it, over a
ledger filled by real plugin processes (`runworkers --once`, `runscheduler --once`): an auditor
reads (the summary, the filtered list, a pipeline job's whole story, light and dark) and is
refused an action; an operator cancels, replays, retries, resets a breaker and pauses and
resumes a schedule, confirming each, and sees the new state. Screenshots of every page go to the
run's screenshot folder (printed at the end of the run)."""

from __future__ import annotations

import json
import subprocess
import sys

from selenium.webdriver.support.ui import Select

from tests.support.checkout import REPO
from tests.support.console_setup import CONFIG_SECRET, PASSWORD, PAYLOAD_SECRET, audit_config, audit_payload
from tests.support.live_api import live_api
from tests.support.processes import cli_env, ductile, ledger, start_workers

PAST = "2026-01-01T00:00:00Z"  # an `at` already due: it fires at the first tick


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
        # django-q2's tables say what they are, in sentence case under their section's title.
        described = browser.find(".app-django_q .ductile-app-description")
        assert described.text.startswith("The gateway's own upkeep, not your jobs")
        assert browser.style(".app-django_q .ductile-app-description", "textTransform") == "none"
        browser.screenshot("console-index-auditor", full=True)


def run(cfg, *argv):
    proc = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), *argv, "--config-dir", str(cfg.path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=cli_env(cfg),
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def fill_ledger(cfg):
    """A pipeline run that succeeds, one that fails (dead), a scheduled poll that fails and opens
    its breaker, a schedule entry to pause, and a job left queued to cancel: all by real processes."""
    for payload in ({}, {"fail": True}):
        run(cfg, "pipeline", "run", "audit", "--async", "--payload", json.dumps(audit_payload(**payload)))
    run(cfg, "runscheduler", "--once")
    workers = start_workers(cfg, "--once")
    output = workers.communicate(timeout=120)[0]
    assert workers.returncode == 0, output
    spec = {"plugin": "stress", "command": "poll", "submitted_by": "api", "payload": {"mode": "ok"}}
    (queued,) = ledger(cfg, "enqueue", [spec])
    jobs = ledger(cfg)
    by = {(j["plugin"], j["status"]): j["id"] for j in jobs}
    return {
        "shout": by[("noisy", "succeeded")],
        "failed": by[("noisy", "dead")],
        "queued": queued,
    }


def act(browser, button, expect_title):
    """Press an action's button on a record page, check the confirmation page, confirm."""
    browser.follow(browser.find(f"a.ductile-action[href$='/act/{button}/']"))
    assert expect_title in browser.find("#content h1").text
    browser.screenshot(f"console-confirm-{button}")
    browser.follow(browser.find(".ductile-confirm-row input[type=submit]"))


def test_auditor_reads_and_is_refused_operator_acts_and_sees_the_new_state(config_dir, browser):
    cfg = audit_config(config_dir)
    cfg.plugins["stress"]["schedules"] = [
        {"id": "boom", "at": PAST, "payload": {"mode": "error"}},
        {"id": "tick", "every": "1h", "payload": {"mode": "ok"}},
    ]
    cfg.plugins["stress"]["circuit_breaker"] = {"threshold": 1, "reset_after": "1h"}
    with live_api(cfg, [{"name": "admin", "token": "tok", "scopes": ["*"]}]) as served:
        for name, role in (("ada", "auditor"), ("olga", "operator")):
            made = ductile(cfg, "admin", "create-user", name, "--role", role, "--password-stdin", input=PASSWORD)
            assert made.returncode == 0, made.stderr
        jobs = fill_ledger(cfg)
        browser.base = f"http://127.0.0.1:{served.port}"

        # -- the auditor: the summary, the filtered list, one pipeline job's story ---------------
        browser.log_in("ada", PASSWORD)
        figures = {
            f.find_element("css selector", ".ductile-figure-label").text: f for f in browser.find_all(".ductile-figure")
        }
        assert figures["failed or dead, last 24 h"].find_element("css selector", ".ductile-figure-value").text == "2"
        assert figures["open circuit breakers"].find_element("css selector", ".ductile-figure-value").text == "1"
        browser.screenshot("console-index-summary", full=True)
        browser.follow(figures["failed or dead, last 24 h"])
        rows = browser.find_all("#result_list tbody tr")
        assert len(rows) == 2 and all("dead" in r.text for r in rows)  # the noisy failure and the scheduled poll
        browser.screenshot("console-jobs-failed-24h", full=True)
        browser.open("/admin/ledger/job/?plugin=noisy")
        assert len(browser.find_all("#result_list tbody tr")) == 2
        assert browser.find("#changelist-filter").text.count("noisy") >= 1
        browser.screenshot("console-jobs-filter-plugin", full=True)
        browser.open("/admin/ledger/job/")
        browser.screenshot("console-jobs-list", full=True)

        browser.open(f"/admin/ledger/job/{jobs['shout']}/change/")
        tree = browser.find("#tree").text
        assert "probe.handle" in tree and "noisy.handle" in tree and "THIS JOB" in tree.upper()
        hops = browser.find_all(".ductile-hop")
        assert [h.get_attribute("style") for h in hops] == ["--depth: 0;", "--depth: 1;"]
        assert "claimed by" in browser.find("#transitions").text
        stderr = browser.find(".ductile-stderr")
        assert "noisy: starting with config" in stderr.text and CONFIG_SECRET not in stderr.text
        assert browser.style(".ductile-stderr", "fontFamily").lower().find("mono") >= 0
        baggage = browser.find("#baggage").text
        assert "origin.user" in baggage and "audit:greet" in baggage and PAYLOAD_SECRET not in baggage
        assert PAYLOAD_SECRET not in browser.text and CONFIG_SECRET not in browser.text
        assert not browser.find_all("a.ductile-action")  # an auditor is offered no action
        browser.screenshot("console-job-story-auditor", full=True)
        # A collapsed JSON node opens on a click (no script: <details>).
        closed = browser.find("#request details.ductile-block:not([open]) summary")
        closed.click()
        browser.theme("dark")
        assert browser.style("body", "backgroundColor") == "rgb(18, 18, 18)"
        browser.screenshot("console-job-story-dark", full=True)
        browser.open("/admin/ledger/job/")
        browser.screenshot("console-jobs-list-dark", full=True)
        browser.open("/admin/")
        browser.screenshot("console-index-dark", full=True)
        browser.theme("light")

        # An auditor who tries an action anyway: 403, said plainly, nothing changed.
        browser.open(f"/admin/ledger/job/{jobs['queued']}/act/cancel/")
        assert "not allowed for your account: nothing was changed" in browser.text
        browser.screenshot("console-refused-auditor")
        assert next(j for j in ledger(cfg) if j["id"] == jobs["queued"])["status"] == "queued"
        browser.open("/admin/config/")
        assert "noisy 1.0.0" in browser.text and CONFIG_SECRET not in browser.text
        browser.screenshot("console-config", full=True)
        browser.follow(browser.find("#logout-form button"))

        # -- the operator: each action, confirmed, and the new state ----------------------------
        browser.log_in("olga", PASSWORD)
        assert "WELCOME, OLGA" in browser.find("#user-tools").text.upper()
        # Cancel from the list: select the queued job, choose the action, confirm.
        browser.open("/admin/ledger/job/?status=queued")
        browser.find(f"input[name=_selected_action][value='{jobs['queued']}']").click()
        Select(browser.find("select[name=action]")).select_by_value("cancel")
        browser.follow(browser.find("button[name=index]"))  # the admin's "Go"
        assert "Cancel: are you sure?" in browser.find("#content h1").text
        browser.screenshot("console-confirm-list-cancel")
        browser.follow(browser.find(".ductile-confirm-row input[type=submit]"))
        assert "cancelled (dead, never run)" in browser.find(".messagelist").text
        browser.open(f"/admin/ledger/job/{jobs['queued']}/change/")
        assert browser.find("#summary .ductile-badge").text == "dead"
        assert "cancelled by admin:olga" in browser.find("#transitions").text

        # Replay the pipeline step from its page; the new job is linked from the message.
        browser.open(f"/admin/ledger/job/{jobs['shout']}/change/")
        browser.screenshot("console-job-story-operator", full=True)
        act(browser, "replay", "Replay: are you sure?")
        message = browser.find(".messagelist")
        assert "replayed as job" in message.text
        browser.follow(message.find_elements("css selector", "a.ductile-id")[-1])
        assert "admin:olga" in browser.find("#summary").text
        assert "replay of" in browser.find("#transitions").text
        browser.screenshot("console-job-replayed")

        # Retry the dead job now.
        browser.open(f"/admin/ledger/job/{jobs['failed']}/change/")
        act(browser, "retry", "Retry now: are you sure?")
        assert "queued again for attempt 2/2" in browser.find(".messagelist").text
        assert browser.find("#summary .ductile-badge").text == "queued"

        # Reset the open breaker; its history names who did it.
        browser.open("/admin/ledger/circuitbreaker/?state=tripped")
        browser.follow(browser.find("#result_list tbody tr th a"))
        browser.screenshot("console-breaker-open", full=True)
        act(browser, "reset", "Reset: are you sure?")
        assert "reset: closed" in browser.find(".messagelist").text
        assert "manual_reset" in browser.text and "admin:olga" in browser.text
        browser.screenshot("console-breaker-reset", full=True)

        # Pause, then resume, a schedule entry.
        browser.open("/admin/ledger/scheduleentry/?status__exact=active")
        browser.follow(next(a for a in browser.find_all("#result_list tbody tr th a") if a.text == "stress:tick"))
        act(browser, "pause", "Pause: are you sure?")
        assert "paused_manual" in browser.text and "paused by admin:olga" in browser.text
        browser.screenshot("console-schedule-paused", full=True)
        act(browser, "resume", "Resume: are you sure?")
        assert "active" in browser.find(".field-state").text
        browser.open("/admin/admin/logentry/")
        assert browser.text.count("olga") >= 5
        browser.screenshot("console-actions-log", full=True)


def test_a_locked_out_person_is_told_why_and_an_operator_sees_and_lifts_it(config_dir, browser):
    with live_api(config_dir, [{"name": "admin", "token": "tok", "scopes": ["*"]}]) as served:
        for name, role in (("ada", "auditor"), ("olga", "operator")):
            made = ductile(config_dir, "admin", "create-user", name, "--role", role, "--password-stdin", input=PASSWORD)
            assert made.returncode == 0, made.stderr
        browser.base = f"http://127.0.0.1:{served.port}"
        for attempt in range(5):
            browser.log_in("ada", f"wrong-{attempt}")
        lockout = browser.find("#lockout")
        assert "Too many failed logins for “ada”" in lockout.text and "refused for 15 minutes" in lockout.text
        assert browser.style("#lockout", "backgroundColor") not in ("rgba(0, 0, 0, 0)", "")  # an error note
        assert browser.find("#id_username").get_attribute("value") == "ada"
        browser.screenshot("console-login-locked-out")
        # The operator logs in from the same address (another name is not held) and lifts it.
        browser.log_in("olga", PASSWORD)
        figure = browser.find("a[href='/admin/axes/accessattempt/?locked=yes'] .ductile-figure-value")
        assert figure.text == "1"
        browser.open("/admin/axes/accessfailurelog/")
        assert browser.text.count("failed") >= 4 and "ada" in browser.text
        browser.screenshot("console-failed-logins", full=True)
        browser.open("/admin/axes/accessattempt/?locked=yes")
        assert "locked out" in browser.text
        browser.screenshot("console-lockouts", full=True)
        browser.follow(browser.find("#result_list tbody a"))
        browser.follow(browser.find("a[href$='/act/unlock/']"))
        browser.follow(browser.find(".ductile-confirm-row input[type=submit]"))
        assert "unlocked: ada may log in from 127.0.0.1 again" in browser.text
        browser.screenshot("console-lockout-lifted")
