"""The operations endpoints: `/config/view` (redaction), `/stopwatch/{plugin}`, `/topology`,
`/system/reload` in-process, and `/events` as Server-Sent Events read by a real HTTP client from
a live server."""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import time
from datetime import timedelta
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone
from rest_framework.test import APIClient

from gateway.config.redaction import REDACTED, redact
from gateway.http import eventstream
from gateway.reports import events
from gateway.reports.redaction import config_view
from gateway.runtime import RUNTIME
from ledger.models import EventRecord, JobStopwatch
from tests.support.runtime import installed_runtime
from tests.support.waiting import wait_for
from tests.support.webhooks import ENV, WEBHOOKS, write_config

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

TOKENS = {
    "admin": ["*"],
    "reader": ["jobs:ro"],
    "plugin-ro": ["plugin:ro"],
    "echo-rw": ["echo:rw"],
    "events": ["events:ro"],
    "events-rw": ["events:rw"],
}
SECRETS = [
    "SECRET-from-env",
    "SECRET-nested-pw",
    "SECRET-auth-header",
    "SECRET-private-note",
    "tok-",
    "KEY-ci",
    "KEY-hook",
]


@pytest.fixture
def ops(config_dir, monkeypatch):
    monkeypatch.setenv("OPS_TEST_ECHO_KEY", "SECRET-from-env")
    config_dir.plugins["echo"]["config"] = {
        "message": "hello",
        "api_key": "${OPS_TEST_ECHO_KEY}",
        "nested": {"Password": "SECRET-nested-pw", "list": [{"AuthHeader": "SECRET-auth-header"}, {"plain": "kept"}]},
    }
    # A plugin whose *name* looks secret-like: names are not field names, so it stays visible.
    config_dir.plugins["keyring"] = {
        "uses": "echo",
        "config": {"message": "named", "Private_Note": "SECRET-private-note"},
    }
    config_dir.routes = [
        {"from": "echo", "event_type": "echo.poll", "to": "probe", "command": "handle"},
        {"from": "probe", "event_type": "probe.done", "to": "ghost"},  # a plugin nobody configured
    ]
    config_dir.extra["api"] = {
        "enabled": True,
        "auth": {"tokens": [{"name": n, "token": f"tok-{n}", "scopes": s} for n, s in TOKENS.items()]},
    }
    config_dir.extra["tokens"] = [
        {"name": "ci", "key": "KEY-ci", "scopes": ["read:jobs"]},
        {"name": "hook-secret", "key": "KEY-hook"},
    ]
    config_dir.extra["pipelines"] = [
        {
            "name": "flow",
            "on": "flow.start",
            "steps": [
                {"id": "a", "uses": "echo"},
                {"id": "b", "uses": "probe", "if": {"path": "payload.go", "op": "eq", "value": True}},
            ],
        },
        {
            "name": "on-fail",
            "on-hook": "job.failed",
            "from_plugin": "stress",
            "steps": [{"id": "page", "uses": "probe"}],
        },
    ]
    with installed_runtime(config_dir):
        yield config_dir


@pytest.fixture
def api(ops):
    return APIClient()


def as_(client, name):
    client.credentials(HTTP_AUTHORIZATION=f"Bearer tok-{name}")
    return client


# -- scopes ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "method", "path", "code"),
    [
        (None, "get", "/config/view", 401),
        ("reader", "get", "/config/view", 403),
        ("admin", "get", "/config/view", 200),
        (None, "get", "/stopwatch/echo", 401),
        ("plugin-ro", "get", "/stopwatch/echo", 403),
        ("reader", "get", "/stopwatch/echo", 200),
        ("ci", "get", "/stopwatch/echo", 200),  # `read:jobs` from tokens.yaml
        (None, "get", "/topology", 401),
        ("reader", "get", "/topology", 403),
        ("echo-rw", "get", "/topology", 403),  # one plugin's scope is not the whole graph's
        ("plugin-ro", "get", "/topology", 200),
        (None, "get", "/events", 401),
        ("reader", "get", "/events", 403),
        ("events", "get", "/events", 200),
        ("events-rw", "get", "/events", 200),  # write implies read
        ("admin", "get", "/events", 200),
        (None, "post", "/system/reload", 401),
        ("plugin-ro", "post", "/system/reload", 403),
        ("admin", "post", "/system/reload", 200),
        (None, "get", "/system/doctor", 401),
        ("plugin-ro", "get", "/system/doctor", 403),
        ("admin", "get", "/system/doctor", 200),
        (None, "get", "/system/selfcheck", 401),
        ("reader", "get", "/system/selfcheck", 403),
        ("admin", "get", "/system/selfcheck", 200),
    ],
)
def test_scope_matrix(api, token, method, path, code):
    if token:
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {'KEY-ci' if token == 'ci' else 'tok-' + token}")
    response = getattr(api, method)(path)
    assert response.status_code == code
    if code >= 400:
        assert set(response.json()) == {"error"}
    response.close()  # an /events answer is a stream the test client never reads


@pytest.mark.parametrize(
    ("path", "headers", "code", "words"),
    [
        ("/events?token=tok-events", {}, 200, None),
        ("/events?token=tok-reader", {}, 403, "events:ro"),
        ("/events?token=nope", {}, 401, "invalid token"),
        ("/jobs?token=tok-admin", {}, 401, "missing bearer token"),  # ?token= is for /events only
        ("/events", {"HTTP_ACCEPT": "text/event-stream"}, 401, "missing bearer token"),  # as EventSource asks
        ("/events?token=tok-events", {"HTTP_LAST_EVENT_ID": "abc"}, 400, "Last-Event-ID"),
        ("/events?token=tok-events&last_event_id=-1", {}, 400, "Last-Event-ID"),
    ],
)
def test_events_refusals_are_json_whatever_the_client_accepts(api, path, headers, code, words):
    response = api.get(path, **headers)
    assert response.status_code == code
    if words:
        assert response["Content-Type"].startswith("application/json")
        assert words in response.json()["error"]
    else:
        assert response["Content-Type"] == "text/event-stream"
    response.close()


# -- /config/view ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"message": "hi", "count": 3, "items": [1, "two"]}, {"message": "hi", "count": 3, "items": [1, "two"]}),
        ({"api_key": "x", "keep": "y"}, {"api_key": REDACTED, "keep": "y"}),
        (
            {"API_KEY": 1, "Token": 2, "passwd": 3, "MyPrivateThing": 4, "Credentials": 5, "AUTHORIZATION": 6},
            {"API_KEY": REDACTED, "Token": REDACTED, "passwd": REDACTED}
            | {"MyPrivateThing": REDACTED, "Credentials": REDACTED, "AUTHORIZATION": REDACTED},
        ),
        ({"client_SECRET": {"user": "u", "pass": "p"}}, {"client_SECRET": REDACTED}),  # the whole subtree goes
        ({"password": None}, {"password": REDACTED}),
        (
            {"a": {"b": [{"c": {"Session_Token": "t", "d": [1, {"PassWord": "p"}]}}, "plain"]}},
            {"a": {"b": [{"c": {"Session_Token": REDACTED, "d": [1, {"PassWord": REDACTED}]}}, "plain"]}},
        ),
        (
            MappingProxyType({"frozen": (MappingProxyType({"secret": "s", "ok": 1}),)}),
            {"frozen": [{"secret": REDACTED, "ok": 1}]},
        ),
    ],
)
def test_redaction_table(given, expected):
    assert redact(given) == expected


def test_names_are_not_judged_as_keys_but_their_values_are():
    plugins = {"plugins": {"keycloak": {"url": "u", "client_secret": "s"}, "tokenizer": {"api_key": "k"}}}
    assert redact(plugins, name_maps={("plugins",)}) == {
        "plugins": {"keycloak": {"url": "u", "client_secret": REDACTED}, "tokenizer": {"api_key": REDACTED}}
    }
    assert redact(plugins)["plugins"] == {"keycloak": REDACTED, "tokenizer": REDACTED}


def test_token_lists_show_names_and_scopes_only():
    view = config_view(
        {
            "api": {
                "listen": "x",
                "auth": {"tokens": [{"name": "a", "token": "t1", "scopes": ["*"]}, {"token": "t2"}]},
            },
            "tokens": [{"name": "ci", "key": "k1", "scopes_file": "s.json", "scopes_hash": "blake3:ab"}, {"key": "k2"}],
        }
    )
    assert view == {
        "api": {
            "listen": "x",
            "auth": {"tokens": [{"name": "a", "scopes": ["*"]}, {"name": "api.auth.tokens[1]", "scopes": []}]},
        },
        "tokens": [{"name": "ci", "scopes_file": "s.json", "scopes_hash": "blake3:ab"}, {"name": "tokens[1]"}],
    }


def test_config_view_redacts_everywhere_and_shows_compiled_routes(api):
    response = as_(api, "admin").get("/config/view")
    assert response.status_code == 200
    text = response.content.decode()
    leaked = [secret for secret in SECRETS if secret in text]
    assert leaked == []
    body = response.json()
    echo = body["plugins"]["echo"]["config"]
    assert echo["message"] == "hello" and echo["api_key"] == REDACTED
    assert echo["nested"] == {"Password": REDACTED, "list": [{"AuthHeader": REDACTED}, {"plain": "kept"}]}
    assert body["plugins"]["keyring"]["config"] == {"message": "named", "Private_Note": REDACTED}
    tokens = body["api"]["auth"]["tokens"]
    assert {t["name"]: t["scopes"] for t in tokens} == TOKENS
    assert all(set(t) == {"name", "scopes"} for t in tokens)
    assert body["tokens"] == [{"name": "ci", "scopes": ["read:jobs"]}, {"name": "hook-secret"}]
    assert body["routes"][0] == {"from": "echo", "event_type": "echo.poll", "to": "probe", "command": "handle"}
    assert set(body["compiled_routes"]) == {"flow", "on-fail"}
    flow = {r["id"]: r for r in body["compiled_routes"]["flow"]["routes"]}
    assert flow["entry:a"]["source"] == {"on": "flow.start", "depth_lt": 20}
    assert flow["entry:a"]["to"] == {"kind": "uses", "step": "a", "plugin": "echo", "command": "handle"}
    assert flow["edge:b__switch->b"]["source"] == {"step": "b__switch", "event_type": "ductile.switch.true"}
    hook = body["compiled_routes"]["on-fail"]["routes"][0]
    assert hook["source"]["hook"] == "job.failed" and hook["source"]["source_plugin"] == "stress"
    assert body["pipelines_fingerprint"] == RUNTIME.get().pipelines.fingerprint()


# -- /stopwatch ------------------------------------------------------------------------------

BASE = timezone.now().replace(microsecond=0) - timedelta(hours=1)
MS = 1_000_000
# Gateway time per row, deliberately in another order than the plugin time (a permutation of 1..20).
GATEWAY_US = [7, 19, 3, 12, 20, 1, 15, 9, 5, 17, 2, 14, 11, 6, 18, 4, 13, 10, 16, 8]


def stopwatch_row(i: int, command: str = "poll", plugin: str = "echo", **fields: Any) -> JobStopwatch:
    """Plugin time i ms. Gateway time GATEWAY_US µs, split so that pre and post each vary on their
    own: only percentiles of the per-row sum (not sums of percentiles) give the permutation's."""
    values = {
        "job_id": f"job-{plugin}-{command}-{i}",
        "plugin": plugin,
        "command": command,
        "enter_wall_ns": 0,
        "exit_wall_ns": 0,
        "dur_ns": i * MS,
        "runtime_pre_ns": GATEWAY_US[(i - 1) % 20] * 1000 - i,
        "runtime_post_ns": i,
        "status": "ok",
        "created_at": BASE + timedelta(seconds=i),
        **fields,
    }
    return JobStopwatch(**values)


@pytest.fixture
def timings(ops):
    rows = [stopwatch_row(i) for i in range(20, 0, -1)]  # inserted newest first: order must not matter
    rows += [stopwatch_row(i, command="handle", dur_ns=10_000 * MS) for i in range(1, 4)]
    rows += [stopwatch_row(1, plugin="retired")]  # no longer configured, but it has history
    JobStopwatch.objects.bulk_create(rows)


# Nearest-rank: the p-th percentile of n sorted samples is sample number ceil(p/100 * n).
# 20 samples of 1..20 ms: p50 = #10 = 10 ms, p95 = #19 = 19 ms, p99 = #20 = 20 ms, max 20 ms; the
# gateway times are a permutation of 1..20 µs, so the same ranks. The newest 5 (16..20 ms): p50 =
# #ceil(2.5) = #3 = 18 ms, p95 = p99 = #5 = 20 ms. Since +15 s, the 6 rows 15..20 ms: p50 = #3 = 17 ms,
# p95 = p99 = #6 = 20 ms.
@pytest.mark.parametrize(
    ("query", "count", "plugin_ms", "gateway_us"),
    [
        ("?command=poll", 20, (10, 19, 20, 20), (10, 19, 20, 20)),
        ("?command=poll&limit=5", 5, (18, 20, 20, 20), None),
        (
            f"?command=poll&since={(BASE + timedelta(seconds=15)).isoformat().replace('+00:00', 'Z')}",
            6,
            (17, 20, 20, 20),
            None,
        ),
        ("", 23, (12, 10_000, 10_000, 10_000), None),  # every command: 23 samples, #12 and #22, #23
    ],
    # Named, not by the query: `since` is a time of the run, and xdist's workers must collect alike.
    ids=["command", "limit", "since", "every-command"],
)
def test_stopwatch_percentiles(api, timings, query, count, plugin_ms, gateway_us):
    response = as_(api, "reader").get(f"/stopwatch/echo{query}")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["count"] == count and body["percentile_method"] == "nearest-rank"
    plugin = body["plugin_time_ns"]
    assert (plugin["p50"], plugin["p95"], plugin["p99"], plugin["max"]) == tuple(v * MS for v in plugin_ms)
    if gateway_us:
        gateway = body["gateway_time_ns"]
        assert (gateway["p50"], gateway["p95"], gateway["p99"], gateway["max"]) == tuple(v * 1000 for v in gateway_us)


def test_stopwatch_of_a_quiet_plugin_a_retired_one_and_an_unknown_one(api, timings):
    as_(api, "reader")
    quiet = api.get("/stopwatch/probe").json()
    assert quiet["count"] == 0 and quiet["plugin_time_ns"] == {"p50": None, "p95": None, "p99": None, "max": None}
    retired = api.get("/stopwatch/retired").json()
    assert retired["count"] == 1 and retired["plugin_time_ns"]["p99"] == 1 * MS
    unknown = api.get("/stopwatch/nope")
    assert unknown.status_code == 404
    assert unknown.json() == {
        "error": "plugin not found",
        "detail": "no plugin named 'nope' is configured or has stopwatch records",
    }


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("?since=yesterday", "since: must be an RFC 3339"),
        ("?limit=0", "limit"),
        ("?limit=x", "limit"),
        ("?limit=100001", "limit"),
    ],
)
def test_stopwatch_filters_validate(api, query, words):
    response = as_(api, "reader").get(f"/stopwatch/echo{query}")
    assert response.status_code == 400
    assert words in response.json()["error"]


# -- /topology -------------------------------------------------------------------------------


def test_topology_joins_routes_pipelines_and_manifests(api):
    response = as_(api, "plugin-ro").get("/topology")
    assert response.status_code == 200
    body = response.json()
    nodes = {n["id"]: n for n in body["nodes"]}
    assert nodes["plugin:echo"] == {"id": "plugin:echo", "kind": "plugin", "name": "echo", "state": "loaded"}
    assert nodes["plugin:ghost"]["state"] == "unknown"  # routed to, but not configured
    assert nodes["signal:job.failed"]["kind"] == "signal"
    assert nodes["event:{payload.event_type}"]["placeholder"] is True  # stress declares a templated type
    edges = {(e["from"], e["kind"], e["to"], e.get("via"), e.get("pipeline")): e for e in body["edges"]}
    # routes: echo emits echo.poll, which starts probe.handle
    assert ("plugin:echo", "emits", "event:echo.poll", "route", None) in edges
    assert edges[("event:echo.poll", "triggers", "plugin:probe", "route", None)]["command"] == "handle"
    # manifests: echo's poll declares echo.poll (and so does its alias)
    assert edges[("plugin:echo", "emits", "event:echo.poll", "manifest", None)]["command"] == "poll"
    assert ("plugin:keyring", "emits", "event:echo.poll", "manifest", None) in edges
    # pipeline flow: the trigger starts step a; a leads to b through b's if:
    entry = edges[("event:flow.start", "triggers", "plugin:echo", "pipeline", "flow")]
    assert (entry["step"], entry["command"], entry["conditional"]) == ("a", "handle", False)
    step = edges[("plugin:echo", "step", "plugin:probe", None, "flow")]
    assert (step["from_step"], step["to_step"], step["event"], step["conditional"]) == ("a", "b", "*", True)
    assert not any("core.switch" in e["to"] for e in body["edges"])
    # hook pipeline: stress's failure starts page
    assert ("plugin:stress", "emits", "signal:job.failed", "pipeline", "on-fail") in edges
    assert edges[("signal:job.failed", "triggers", "plugin:probe", "pipeline", "on-fail")]["step"] == "page"
    mermaid = body["mermaid"].splitlines()
    assert mermaid[0] == "flowchart LR"
    node = {name: node_id for node_id, name in re.findall(r'^    (n\d+)[\[({]+"([^"]+)"', body["mermaid"], re.M)}
    assert f'    {node["echo"]} -.->|"flow (if)"| {node["probe"]}' in mermaid
    assert f'    {node["echo.poll"]} -->|"handle"| {node["probe"]}' in mermaid
    assert f'    {node["job.failed"]} -->|"on-fail: handle"| {node["probe"]}' in mermaid


# -- /system/reload --------------------------------------------------------------------------


def test_reload_serves_the_new_config(api, ops):
    ops.extra["pipelines"].append({"name": "later", "on": "later.start", "steps": [{"uses": "echo"}]})
    ops.write()
    before = RUNTIME.get().loaded_at
    response = as_(api, "admin").post("/system/reload")
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["supervisor_pid"]) == ("ok", None)  # no `system start` here: this process only
    assert body["message"].startswith("Configuration reloaded: this API process only (no running gateway:")
    assert body["reloaded_at"].endswith("Z") and RUNTIME.get().loaded_at > before
    assert "later" in api.get("/config/view").json()["compiled_routes"]


def test_reload_says_which_listeners_it_adds_and_that_only_system_start_runs_them(api, ops, monkeypatch):
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    write_config(ops, WEBHOOKS, listen="127.0.0.1:18932")
    body = as_(api, "admin").post("/system/reload").json()
    assert body["listeners"] == ["the webhook listener starts on 127.0.0.1:18932"]
    assert body["message"].endswith(
        "Not done without `system start`, which runs the listeners: the webhook listener starts on 127.0.0.1:18932."
    )
    assert as_(api, "admin").post("/system/reload").json()["listeners"] == []  # nothing changes a second time


def test_reload_of_a_broken_config_keeps_the_old_one_and_lists_every_problem(api, ops):
    running = RUNTIME.get()
    ops.extra["pipelines"] += [
        {"name": "bad-one", "on": "x", "steps": [{"uses": "missing-one"}]},
        {"name": "bad-two", "on": "y", "steps": [{"uses": "echo.nope"}]},
    ]
    ops.write()
    response = as_(api, "admin").post("/system/reload")
    assert response.status_code == 409  # the original's answer to a refused reload
    body = response.json()
    assert "the running configuration is kept" in body["error"]
    assert "unknown plugin or alias 'missing-one'" in body["error"]
    assert "plugin 'echo' has no command 'nope'" in body["error"]
    assert [p["key"] for p in body["problems"]] == ["pipelines[2].steps[0].uses", "pipelines[3].steps[0].uses"]
    assert all(p["file"].endswith("config.yaml") and p["line"] for p in body["problems"])
    assert RUNTIME.get() is running
    assert set(api.get("/config/view").json()["compiled_routes"]) == {"flow", "on-fail"}


def test_system_doctor_answers_what_the_cli_answers(api, ops):
    ops.plugins["ghost"] = {"config": {}}
    ops.write()
    as_(api, "admin").post("/system/reload")
    body = as_(api, "admin").get("/system/doctor").json()
    assert body["healthy"] is False
    (finding,) = [f for f in body["findings"] if f["check"] == "plugin_not_discovered"]
    assert (
        finding["severity"] == "error" and "'ghost'" in finding["message"] and "key plugins.ghost" in finding["where"]
    )
    # The same findings in the shape the original's /system/doctor answers, for its clients.
    assert body["ok"] is False and body["captured_at"].endswith("Z")
    (check,) = [c for c in body["checks"] if c["name"] == "plugin_not_discovered"]
    assert check == {
        "name": "plugin_not_discovered",
        "status": "fail",
        "detail": finding["message"],
        "field": "plugins.ghost",
    }
    assert {c["status"] for c in body["checks"]} <= {"fail", "warn", "ok"}


SELFCHECK = ["config_discovery", "config_load", "pid_lock", "db_integrity", "db_schema", "queue_terminal_freshness"]


def selfcheck_of(api) -> tuple[bool, dict[str, dict]]:
    body = as_(api, "admin").get("/system/selfcheck").json()
    assert [c["name"] for c in body["checks"]] == SELFCHECK and body["captured_at"].endswith("Z")
    assert set(body) == {"ok", "healthy", "captured_at", "checks"}  # `system selfcheck --json`'s shape
    return body["ok"], {c["name"]: c for c in body["checks"]}


@pytest.mark.process
def test_system_selfcheck_is_the_running_gateways_view(api, ops):
    """The lock held by the gateway this API belongs to is healthy, a live stranger's is not; the
    database checks wait for the gateway to stop; the config is the one on disk now."""
    pid_file = RUNTIME.get().config.state_path.parent / "ductile.pid"
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(f"{os.getppid()}\n")  # the process that started this one, as `system start` starts gunicorn
    ok, checks = selfcheck_of(api)
    assert ok is True
    assert checks["pid_lock"]["status"] == "ok" and f"pid {os.getppid()}" in checks["pid_lock"]["detail"]
    for name in ("db_integrity", "db_schema", "queue_terminal_freshness"):
        assert checks[name]["status"] == "skipped" and "quiesce" in checks[name]["detail"]

    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        pid_file.write_text(f"{stranger.pid}\n")
        ok, checks = selfcheck_of(api)
        assert ok is False
        assert (
            checks["pid_lock"]["status"] == "fail"
            and f"another gateway is running (pid {stranger.pid})" in (checks["pid_lock"]["detail"])
        )
    finally:
        stranger.kill()
        stranger.wait()

    ops.service["max_workers"] = "many"  # broken on disk; this process keeps the config it runs on
    ops.write()
    ok, checks = selfcheck_of(api)
    assert ok is False
    assert checks["config_load"]["status"] == "fail" and "service.max_workers" in checks["config_load"]["detail"]
    assert as_(api, "admin").get("/system/doctor").status_code == 200


# -- /events over real HTTP ------------------------------------------------------------------


class SseClient:
    """Reads an SSE stream with http.client; every read has a timeout, so a stalled stream fails."""

    def __init__(self, base_url: str, path: str, headers: dict[str, str] | None = None, timeout: float = 10):
        url = urlsplit(base_url)
        assert url.hostname, f"no host in {base_url!r}"
        self.timeout = timeout
        self.conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
        self.conn.request("GET", path, headers=headers or {})
        self.response = self.conn.getresponse()

    def block(self) -> dict[str, Any]:
        """The next block: its fields, and `comments`."""
        fields: dict[str, Any] = {"comments": []}
        while True:
            line = self.response.readline().decode()
            assert line, "the stream ended"
            line = line.rstrip("\n")
            if not line:
                return fields
            name, _, value = line.partition(":")
            if not name:
                fields["comments"].append(value.strip())
            else:
                fields[name] = value.removeprefix(" ")

    def event(self) -> dict[str, Any]:
        """The next block that carries data (skipping the opening and keep-alive comments). Keep-alives
        never let a read time out, so the wait for data has its own deadline."""
        deadline = time.monotonic() + self.timeout
        while "data" not in (block := self.block()):
            assert time.monotonic() < deadline, f"no event within {self.timeout}s"
        return {"id": int(block["id"]), "type": block["event"], "data": json.loads(block["data"])}

    def close(self) -> None:
        self.response.close()
        self.conn.close()


def write_events(*types: str) -> list[int]:
    """Append events as a finishing job does (in its transaction); their ids, in order."""
    with transaction.atomic():
        EventRecord.record(
            [{"type": t, "payload": {"n": i}, "source": "test"} for i, t in enumerate(types)],
            job_id=None,
            now=timezone.now(),
        )
    return list(EventRecord.objects.order_by("-id").values_list("id", flat=True)[: len(types)])[::-1]


@pytest.fixture
def sse(ops, live_server, monkeypatch):
    # Short keep-alives: a closed client is noticed at the next write, so streams end promptly.
    monkeypatch.setattr(eventstream, "KEEPALIVE_SECONDS", 0.3)
    clients: list[SseClient] = []

    def connect(path: str = "/events", token: str | None = "tok-events", **headers: str) -> SseClient:
        if token:
            headers["Authorization"] = f"Bearer {token}"
        client = SseClient(live_server.url, path, headers)
        clients.append(client)
        return client

    yield connect
    for client in clients:
        client.close()
    # The server side lets go of every stream (and with the last, the wake-up listener).
    wait_for(lambda: eventstream.BELL.subscribers == 0, timeout=10, what="the streams to end")


def test_events_stream_live_rows_in_order_and_resume_after_last_event_id(sse):
    before = write_events("old.event")  # written before anyone listened: not part of a fresh stream
    stream = sse()
    assert stream.response.status == 200
    assert stream.response.getheader("Content-Type") == "text/event-stream"
    assert stream.response.getheader("Cache-Control") == "no-cache"
    opening = stream.block()
    assert opening["comments"] == ["stream open"] and int(opening["id"]) == before[-1]

    first = write_events("demo.one", "demo.two")
    got = [stream.event(), stream.event()]
    assert [(e["id"], e["type"]) for e in got] == list(zip(first, ["demo.one", "demo.two"], strict=True))
    assert got[1]["data"]["payload"] == {"n": 1} and got[1]["data"]["source"] == "test"
    (third,) = write_events("demo.three")
    assert stream.event()["id"] == third
    stream.close()

    missed = write_events("demo.four", "demo.five")  # while nobody listens
    resumed = sse(**{"Last-Event-ID": str(third)})
    assert [resumed.event()["id"] for _ in missed] == missed
    (sixth,) = write_events("demo.six")
    assert resumed.event() == {"id": sixth, "type": "demo.six", "data": row_data(sixth)}


def test_a_last_event_id_past_the_newest_resumes_from_the_newest(sse):
    """What a client sends after the gateway's ledger was restored from an older backup: an id
    this ledger has not reached. Resuming after it would wait silently for ids used elsewhere."""
    (newest,) = write_events("before.restore")
    stream = sse(**{"Last-Event-ID": str(newest + 1_000_000)})
    assert int(stream.block()["id"]) == newest
    (after,) = write_events("after.restore")
    assert stream.event()["id"] == after


def row_data(row_id: int) -> dict[str, Any]:
    row = EventRecord.objects.get(pk=row_id)
    return {
        "id": row.id,
        "type": row.type,
        "event_id": row.event_id,
        "source": row.source,
        "job_id": row.job_id,
        "payload": row.payload,
        "created_at": row.created_at.isoformat().replace("+00:00", "Z"),
    }


def test_events_type_filter_query_token_and_keep_alive(sse):
    ids = write_events("a.kind", "b.kind", "c.kind", "b.kind")
    stream = sse("/events?types=b.kind,c.kind&last_event_id=0&token=tok-events", token=None)
    assert [(e["id"], e["type"]) for e in (stream.event(), stream.event(), stream.event())] == [
        (ids[1], "b.kind"),
        (ids[2], "c.kind"),
        (ids[3], "b.kind"),
    ]
    # Quiet: keep-alive comments hold the connection open.
    assert "keep-alive" in stream.block()["comments"]


def test_closing_the_client_ends_the_stream_on_the_server(sse):
    stream = sse()
    stream.block()
    assert eventstream.BELL.subscribers == 1
    stream.close()
    wait_for(lambda: eventstream.BELL.subscribers == 0, timeout=5, what="the server to notice the disconnect")


def test_head_answers_the_stream_headers_and_holds_nothing_open(sse, live_server):
    url = urlsplit(live_server.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    conn.request("HEAD", "/events", headers={"Authorization": "Bearer tok-events"})
    response = conn.getresponse()
    assert (response.status, response.getheader("Content-Type")) == (200, "text/event-stream")
    assert response.read() == b""
    conn.close()
    assert eventstream.BELL.subscribers == 0


def test_the_cursor_sends_late_commits_into_its_gaps_until_they_expire():
    """Pure: what the stream asks the database for after each batch (PostgreSQL commit order)."""
    cursor = events.EventCursor(last=10)
    cursor.advance([11, 14, 15, 18], now=0.0)  # 12, 13, 16 and 17 not visible (yet)
    assert cursor.last == 18
    assert [(g.low, g.high) for g in cursor.gaps] == [(12, 13), (16, 17)]
    cursor.advance([13, 16, 19], now=1.0)  # late commits fill gaps; 19 is new
    assert [(g.low, g.high) for g in cursor.gaps] == [(12, 12), (17, 17)]
    assert str(cursor.pending(now=1.0)) == str(Q(id__gt=19) | Q(id__gte=12, id__lte=12) | Q(id__gte=17, id__lte=17))
    assert str(cursor.pending(now=events.GAP_GRACE_SECONDS + 1)) == str(Q(id__gt=19))  # rolled back


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite commits in id order: one writer at a time")
def test_a_row_committed_after_a_later_one_still_arrives(sse):
    import psycopg

    stream = sse()
    stream.block()
    settings = connection.settings_dict
    params = {"dbname": settings["NAME"], "user": settings["USER"], "host": settings["HOST"], "port": settings["PORT"]}
    with psycopg.connect(**{k: v for k, v in params.items() if v}) as slow:
        with slow.transaction():
            inserted = slow.execute(
                "INSERT INTO event_log (type, source, payload, created_at) VALUES ('slow.one', '', '{}', now()) "
                "RETURNING id"
            ).fetchone()
            assert inserted is not None  # INSERT ... RETURNING yields the one row it wrote
            (early,) = inserted
            (later,) = write_events("fast.two")
            assert later > early
            assert stream.event()["id"] == later  # the stream has moved past `early`'s id
        assert stream.event() == {"id": early, "type": "slow.one", "data": row_data(early)}


def test_a_process_whose_config_does_not_load_answers_503_naming_the_problem(config_dir):
    # A gunicorn worker started again (a death, a reload) after its config file was broken: it
    # cannot tell a token from another, and says why instead of "internal server error".
    config_dir.service["max_workers"] = 0
    config_dir.write()
    previous = (RUNTIME._current, RUNTIME.error, RUNTIME.config_dir)
    RUNTIME._current = None
    RUNTIME.load(config_dir.path)
    try:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION="Bearer tok-anything")
        for method, path in (("get", "/jobs"), ("post", "/system/reload")):
            response = getattr(client, method)(path)
            assert response.status_code == 503, (path, response.status_code)
            error = response.json()["error"]
            assert "config does not load" in error and "config.yaml:" in error and "service.max_workers" in error
            assert response["Retry-After"]
    finally:
        RUNTIME._current, RUNTIME.error, RUNTIME.config_dir = previous
