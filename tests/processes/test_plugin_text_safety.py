"""What a plugin writes reaches people through every surface, never a secret or a terminal escape:
a real gateway (`system start` with its API and workers) runs `leaky`, a real plugin that repeats
what it was given in its stderr, its error, its result and an event. Given the admin API token and
a relay HMAC secret, every surface shows `[REDACTED]` (the API's job reads and job logs, /system/watch,
/events, an auditor's dashboard stream, the gateway's own log, the CLI's text and --json); given
terminal escapes, a bidi override and rich markup, every CLI text shows them escaped, as text."""

from __future__ import annotations

import http.client
import http.cookiejar
import json
import re
import shlex
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest

from tests.support.config_dirs import ConfigDir
from tests.support.live_api import LiveApi, live_api
from tests.support.processes import ductile, ductile_json, ledger
from tests.support.waiting import wait_for

ADMIN_TOKEN = "tok-admin-5f0c9a7e31"
READER_TOKEN = "tok-reader-2b8d4c6a90"  # an auditor's: jobs:ro and events:ro
RELAY_SECRET = "relay-hmac-8e1d2f3a4b5c"
SECRETS = (ADMIN_TOKEN, RELAY_SECRET)
SAID = f"admin {ADMIN_TOKEN} relay {RELAY_SECRET}"
PASSWORD = "correct horse battery"
# Clears the screen, writes a fake all-clear, retitles the window, rings the bell, reverses what
# follows, and is rich markup twice over (a style, and a hyperlink).
HOSTILE = (
    "\x1b[2J\x1b[H ALL OK \x1b]0;pwned\x07\x07 \u202etxt.exe \x9b31m "
    "[bold red]markup[/] [link=http://example.invalid]click[/link]"
)
RAW_CONTROLS = ("\x1b", "\x07", "\u202e", "\x9b")


def config(cfg: ConfigDir) -> ConfigDir:
    cfg.plugins["leaky"] = {"config": {}, "retry": {"max_attempts": 1}}
    # The relay's shared secret, as a sender's config holds it (tokens.yaml, by secret_ref).
    cfg.extra["tokens"] = [{"name": "relay-lab", "key": RELAY_SECRET}]
    cfg.extra["instances"] = [
        {
            "name": "lab",
            "base_url": "http://127.0.0.1:9",
            "ingress_path": "/ingest/peer/home",
            "secret_ref": "relay-lab",
        }
    ]
    cfg.extra["pipelines"] = [{"name": "leak", "on": "leak.start", "steps": [{"id": "repeat", "uses": "leaky.poll"}]}]
    return cfg


TOKENS = [
    {"name": "admin", "token": ADMIN_TOKEN, "scopes": ["*"]},
    {"name": "reader", "token": READER_TOKEN, "scopes": ["jobs:ro", "events:ro"]},
]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory) -> Iterator[tuple[LiveApi, ConfigDir, dict[str, str]]]:
    cfg = config(ConfigDir(tmp_path_factory.mktemp("leaky") / "config"))
    with live_api(cfg, TOKENS, workers=True) as served:
        made = ductile(cfg, "admin", "create-user", "ada", "--role", "auditor", "--password-stdin", input=PASSWORD)
        assert made.returncode == 0, made.stderr
        jobs = {
            "failed": trigger(served, {"say": SAID}),
            "said": trigger(served, {"say": SAID, "mode": "ok"}),
            "hostile": trigger(served, {"say": HOSTILE}),
            "hostile_event": trigger(served, {"say": HOSTILE, "mode": "ok", "event_type": f"leaky.{HOSTILE}"}),
        }
        for job_id in jobs.values():
            wait_for(lambda job_id=job_id: ended(served, job_id), 30, what=f"job {job_id} to end")
        yield served, cfg, jobs


def trigger(served: LiveApi, payload: dict[str, str]) -> str:
    code, body = served.api.call("POST", "/plugin/leaky/poll", {"payload": payload}, token=ADMIN_TOKEN)
    assert code == 202, body
    return str(body["job_id"])


def ended(served: LiveApi, job_id: str) -> bool:
    return served.api.call("GET", f"/job/{job_id}", token=ADMIN_TOKEN)[1]["status"] in ("succeeded", "failed")


def assert_hidden(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"a secret shown by {where}: {text[:3000]}"
    assert "[REDACTED]" in text, f"nothing redacted by {where}: {text[:3000]}"


# -- item 3: secrets -----------------------------------------------------------------------------


def test_an_auditor_reads_every_job_surface_of_the_api_with_the_secrets_redacted(gateway):
    served, _, jobs = gateway
    failed, said = jobs["failed"], jobs["said"]
    for path in (
        f"/job/{failed}",
        f"/job/{failed}/tree",
        f"/job/{said}",
        f"/job-logs?job_id={failed}",
        f"/job-logs?job_id={said}&include_result=true",
        "/job-logs?plugin=leaky&query=login",
        "/system/watch",
    ):
        code, body = served.api.call("GET", path, token=READER_TOKEN)
        assert code == 200, (path, body)
        assert_hidden(json.dumps(body), path)
    code, job = served.api.call("GET", f"/job/{failed}", token=READER_TOKEN)
    assert job["last_error"] == "admin [REDACTED] relay [REDACTED]: login refused"
    logs = served.api.call("GET", f"/job-logs?job_id={failed}", token=READER_TOKEN)[1]["logs"]
    assert logs[0]["stderr"] == "connecting with admin [REDACTED] relay [REDACTED]\n"
    assert served.api.call("GET", f"/job/{said}", token=READER_TOKEN)[1]["result"]["result"] == (
        "admin [REDACTED] relay [REDACTED]"
    )
    watch = served.api.call("GET", "/system/watch", token=READER_TOKEN)[1]
    shown = {f["job_id"]: f["last_error"] for f in watch["failures"]}
    assert shown[failed] == "admin [REDACTED] relay [REDACTED]: login refused"


def read_stream(response: http.client.HTTPResponse, until: str, timeout: float = 20) -> str:
    """What an event stream sent, up to the first frame that holds `until`."""
    text = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = response.readline().decode()
        if not line:
            break
        text += line
        if until in text and text.endswith("\n\n"):
            return text
    raise AssertionError(f"{until!r} not in the stream: {text[-3000:]}")


def test_the_events_stream_sends_the_plugins_event_redacted(gateway):
    served, _, jobs = gateway
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=20)
    conn.request("GET", "/events?last_event_id=0&types=leaky.said", headers={"Authorization": f"Bearer {READER_TOKEN}"})
    response = conn.getresponse()
    assert response.status == 200
    sent = read_stream(response, jobs["said"])
    conn.close()
    assert_hidden(sent, "/events")
    data = json.loads(next(line for line in sent.splitlines() if jobs["said"] in line).removeprefix("data: "))
    assert data["payload"] == {"said": "admin [REDACTED] relay [REDACTED]"}


def console_cookies(served: LiveApi) -> str:
    """Logged in to the audit console as the auditor, as a browser is: the session cookie."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    base = f"http://127.0.0.1:{served.port}"
    page = opener.open(f"{base}/admin/login/", timeout=20).read().decode()
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert csrf, page[:2000]
    form = {"username": "ada", "password": PASSWORD, "csrfmiddlewaretoken": csrf.group(1), "next": "/dashboard/"}
    opener.open(f"{base}/admin/login/?next=/dashboard/", urllib.parse.urlencode(form).encode(), timeout=20).read()
    assert any(cookie.name == "sessionid" for cookie in jar), "the login did not give a session"
    return "; ".join(f"{cookie.name}={cookie.value}" for cookie in jar)


def test_an_auditors_dashboard_stream_shows_the_failure_redacted(gateway):
    served, _, jobs = gateway
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=20)
    conn.request("GET", "/dashboard/stream?view=overview", headers={"Cookie": console_cookies(served)})
    response = conn.getresponse()
    assert response.status == 200, response.read()[:2000]
    sent = read_stream(response, jobs["failed"])
    conn.close()
    assert_hidden(sent, "/dashboard/stream")
    snapshot = json.loads(next(line for line in sent.splitlines() if jobs["failed"] in line).removeprefix("data: "))
    shown = {f["job_id"]: f["last_error"] for f in snapshot["failures"]}
    assert shown[jobs["failed"]] == "admin [REDACTED] relay [REDACTED]: login refused"


def test_the_gateways_own_log_shows_the_plugins_stderr_and_error_redacted(gateway):
    served, _, jobs = gateway
    served.output.wait_for(jobs["failed"])
    lines = [line for line in served.output.lines if '"leaky"' in line]
    assert any("plugin stderr: connecting with admin [REDACTED] relay [REDACTED]" in line for line in lines), lines
    assert any("(admin [REDACTED] relay [REDACTED]: login refused)" in line for line in lines), lines
    for secret in SECRETS:
        assert secret not in served.output.text


def test_the_cli_shows_jobs_logs_and_the_watch_redacted_as_text_and_json(gateway):
    served, cfg, jobs = gateway
    failed, said = jobs["failed"], jobs["said"]
    reads = [
        ("job", "inspect", failed),
        ("job", "inspect", said),
        ("job", "logs", "--plugin", "leaky", "--include-result"),
        ("system", "watch", "--once"),
        ("system", "watch", "--once", "--api-url", f"http://127.0.0.1:{served.port}", "--api-key", READER_TOKEN),
    ]
    for args in reads:
        shown = ductile(cfg, *args)
        assert shown.returncode == 0, (args, shown.stderr)
        assert_hidden(shown.stdout + shown.stderr, shlex.join(args))
        code, data = ductile_json(cfg, *args)
        assert code == 0, (args, data)
        assert_hidden(json.dumps(data), shlex.join(args) + " --json")
    # What the CLI runs itself: the plugin's answer, the tree a pipeline run waits for, its own log.
    payload = json.dumps({"say": SAID})
    for args in (
        ("plugin", "run", "leaky", "--payload", payload),
        ("pipeline", "run", "leak", "--wait", "--payload", payload),
    ):
        ran = ductile(cfg, *args)
        assert ran.returncode == 1, (args, ran.stdout, ran.stderr)
        assert_hidden(ran.stdout, shlex.join(args))
        for secret in SECRETS:
            assert secret not in ran.stderr


def test_a_search_cannot_find_a_secret_out_a_character_at_a_time(gateway):
    """A search matches what it shows: a prefix of the admin token, which an auditor would grow a
    character at a time by watching what it finds, finds nothing in job logs (API and CLI) or in
    the console's job search; what the plugin wrote around it is still found."""
    served, cfg, jobs = gateway
    probe = urllib.parse.quote(ADMIN_TOKEN[:-1])
    code, body = served.api.call("GET", f"/job-logs?plugin=leaky&query={probe}", token=READER_TOKEN)
    assert (code, body["total"], body["logs"]) == (200, 0, [])
    code, body = served.api.call(
        "GET", f"/job-logs?plugin=leaky&query={urllib.parse.quote('login refused')}", token=READER_TOKEN
    )
    assert jobs["failed"] in {log["job_id"] for log in body["logs"]}
    assert ductile_json(cfg, "job", "logs", "--query", ADMIN_TOKEN[:-1])[1]["total"] == 0
    cookies = {"Cookie": console_cookies(served)}
    for term, found in ((probe, False), (urllib.parse.quote("login refused"), True)):
        conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=20)
        conn.request("GET", f"/admin/ledger/job/?q={term}", headers=cookies)
        page = conn.getresponse().read().decode()
        conn.close()
        assert (jobs["failed"] in page) is found, (term, page[-2000:])


# -- item 12: terminal escapes ------------------------------------------------------------------


def assert_escaped(text: str, where: str) -> None:
    for raw in RAW_CONTROLS:
        assert raw not in text, f"{raw!r} reached the terminal from {where}: {text[:3000]!r}"
    assert "\\x1b[2J\\x1b[H ALL OK \\x1b]0;pwned\\x07\\x07 \\u202etxt.exe \\x9b31m" in text, (where, text[:3000])


def test_hostile_plugin_text_is_shown_escaped_by_every_cli_text(gateway):
    _, cfg, jobs = gateway
    hostile, event = jobs["hostile"], jobs["hostile_event"]
    payload = json.dumps({"say": HOSTILE})
    for args in (
        ("job", "inspect", hostile),
        ("job", "inspect", event, "-v"),
        ("job", "logs", "--plugin", "leaky", "--include-result"),
        ("plugin", "run", "leaky", "--payload", payload),
        ("pipeline", "run", "leak", "--wait", "--payload", payload),
        ("system", "watch", "--once"),
    ):
        shown = ductile(cfg, *args, COLUMNS="400")
        assert_escaped(shown.stdout, shlex.join(args))
        for raw in RAW_CONTROLS:
            assert raw not in shown.stderr, (args, shown.stderr[-2000:])
    # rich draws plugin text as text: its markup stays on the screen instead of styling it.
    watch = ductile(cfg, "system", "watch", "--once", COLUMNS="400").stdout
    event_rows = [line for line in watch.splitlines() if "leaky.\\x1b[2J" in line]  # the recent events' type
    # (A long type is cut with an ellipsis to fit its column; the markup before the cut is text.)
    assert event_rows and "[bold red]markup[/] [link=http://e" in event_rows[0], watch
    # --json escapes them as JSON does, and gives the text back exactly.
    code, data = ductile_json(cfg, "job", "inspect", hostile)
    assert code == 0 and data["last_error"] == f"{HOSTILE}: login refused"
    raw = ductile(cfg, "job", "inspect", hostile, "--json").stdout
    assert not any(c in raw for c in RAW_CONTROLS) and "\\u202e" in raw


def test_the_api_command_copies_the_event_stream_escaped(gateway):
    """`ductile api /events` copies the stream line by line as it comes: a plugin's event type is
    the frame's `event:` field, as the plugin chose it."""
    served, cfg, jobs = gateway
    url = f"http://127.0.0.1:{served.port}"
    with pytest.raises(subprocess.TimeoutExpired) as stopped:  # a stream never ends by itself
        ductile(cfg, "api", "/events?last_event_id=0", "--api-url", url, "--api-key", READER_TOKEN, timeout=10)
    copied = (stopped.value.stdout or b"").decode()
    assert jobs["hostile_event"] in copied, copied[-3000:]
    assert_escaped(copied, "api /events")
    assert_hidden(copied, "api /events")


def test_the_workers_log_in_text_format_escapes_what_json_leaves(tmp_path):
    """`service.log_format: text`, for a person at a terminal: the plugin's stderr is quoted with
    JSON's escapes, and the characters JSON leaves as they are (C1, bidi) are escaped too."""
    cfg = config(ConfigDir(tmp_path / "config"))
    cfg.service["log_format"] = "text"
    cfg.extra["api"] = {"auth": {"tokens": TOKENS}}
    cfg.write()
    job = {"plugin": "leaky", "command": "poll", "submitted_by": "cli", "payload": {"say": f"{SAID} {HOSTILE}"}}
    ledger(cfg, "enqueue", [job])
    run = ductile(cfg, "runworkers", "--once")
    assert run.returncode == 0, run.stderr[-2000:]
    assert_hidden(run.stdout, "runworkers' log")
    for raw in RAW_CONTROLS:
        assert raw not in run.stdout, run.stdout
    assert "\\u202etxt.exe \\u009b31m" in run.stdout
