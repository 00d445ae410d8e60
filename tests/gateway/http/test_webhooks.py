"""The webhook listener (spec 000 §10, "Webhooks", Configuration Specification §4.3): endpoints
typed and refused at load naming file, line and key; HMAC-SHA256 over the raw body; 413 before the
signature; 403 `forbidden` with nothing enqueued; 404 and 405 as JSON; the job a plugin receives;
all in-process (tests/processes/test_webhooks_gunicorn.py runs the listener as a real gunicorn)."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client, override_settings

from gateway.config.errors import ConfigError, ConfigProblem
from gateway.config.webhooks import DEFAULT_MAX_BODY_SIZE, Webhooks, parse_size
from gateway.http.refusals import WEBHOOK_DELIVERY, Refusals, read_tally
from gateway.http.webhooks import views
from gateway.runtime import RUNTIME, build_runtime
from ledger.models import Job, JobLog, JobTransition
from tests.support.config_dirs import ConfigDir
from tests.support.jobs import run_until_idle
from tests.support.runtime import installed_runtime
from tests.support.webhooks import DUCTILE, ENV, HUB, SECRET, WEBHOOKS, endpoint, sign, write_config

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


@pytest.fixture
def listener(config_dir: ConfigDir) -> Iterator[Client]:
    """An in-process listener on `config_dir` (the webhook URLconf, the real queue)."""
    write_config(config_dir)
    with (
        installed_runtime(config_dir, {**os.environ, **ENV}),
        override_settings(ROOT_URLCONF="gateway.http.webhooks.urls"),
    ):
        yield Client()


def post(client: Client, path: str, body: bytes, headers: dict[str, str] | None = None) -> Any:
    return client.post(path, data=body, content_type="application/json", headers=headers or {})


def request_seen_by_plugin(job_id: str) -> Any:
    """The request envelope the probe plugin echoed back."""
    result = JobLog.objects.filter(job_id=job_id).latest("completed_at").result
    assert result is not None
    return json.loads(result)["result"]["request"]


# -- signatures -----------------------------------------------------------------------------------

BODY = b'{"action": "opened", "number": 7}'


@pytest.mark.parametrize(
    "signature",
    [sign(BODY), "sha256=" + sign(BODY), sign(BODY).upper(), "sha256=" + sign(BODY).upper()],
    ids=["hex", "sha256-prefix", "uppercase-hex", "prefix-and-uppercase"],
)
def test_a_valid_signature_is_accepted_with_202_and_one_queued_job(listener: Client, signature: str) -> None:
    response = post(listener, "/webhook/github", BODY, {HUB: signature})
    assert response.status_code == 202
    assert response["Content-Type"] == "application/json"
    answer = response.json()
    assert answer["status"] == "queued"
    job = Job.objects.get()
    assert answer["job_id"] == job.id
    assert (job.plugin, job.command, job.submitted_by, job.status) == ("probe", "handle", "webhook", "queued")
    assert job.payload == {"action": "opened", "number": 7}


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {HUB: ""},
        {HUB: sign(BODY, "not-the-secret")},
        {HUB: sign(b'{"action": "closed", "number": 7}')},
        {HUB: sign(BODY + b" ")},
        {HUB: "sha1=" + sign(BODY)},
        {HUB: "sha256=" + sign(BODY)[:-2]},
        {HUB: "sha256=sha256=" + sign(BODY)},
        {HUB: " " + sign(BODY) + "zz"},
        {HUB: hashlib.sha256(BODY).hexdigest()},
        {DUCTILE: sign(BODY)},
    ],
    ids=[
        "missing",
        "empty",
        "wrong-secret",
        "other-body",
        "body-changed-by-one-byte",
        "sha1-prefix",
        "truncated",
        "double-prefix",
        "not-hex",
        "plain-sha256-no-key",
        "wrong-header",
    ],
)
def test_a_missing_or_wrong_signature_is_403_forbidden_and_nothing_is_enqueued(
    listener: Client, headers: dict[str, str]
) -> None:
    response = post(listener, "/webhook/github", BODY, headers)
    assert response.status_code == 403
    assert response.json() == {"error": "forbidden"}
    assert not Job.objects.exists()


def test_the_endpoints_own_signature_header_carries_the_signature(listener: Client) -> None:
    body = b'{"ping": true}'
    signature = "sha256=" + sign(body, ENV["OTHER_SECRET"])
    assert post(listener, "/webhook/small", body, {HUB: signature}).status_code == 403
    response = post(listener, "/webhook/small", body, {DUCTILE: signature})
    assert response.status_code == 202
    assert Job.objects.get().command == "poll"


def test_each_endpoint_verifies_with_its_own_secret(listener: Client) -> None:
    body = b"{}"
    assert post(listener, "/webhook/small", body, {DUCTILE: sign(body)}).status_code == 403
    assert post(listener, "/webhook/github", body, {HUB: sign(body, "another-secret")}).status_code == 403
    assert not Job.objects.exists()


# -- sizes ----------------------------------------------------------------------------------------


def test_a_body_of_exactly_max_body_size_is_accepted(listener: Client) -> None:
    body = b'"' + b"x" * 62 + b'"'
    assert len(body) == 64
    response = post(listener, "/webhook/small", body, {DUCTILE: sign(body, ENV["OTHER_SECRET"])})
    assert response.status_code == 202
    assert Job.objects.get().payload == {"value": "x" * 62}


@pytest.mark.parametrize("valid_signature", [False, True])
def test_one_byte_over_max_body_size_is_413_before_the_signature_is_checked(
    listener: Client, valid_signature: bool
) -> None:
    body = b"x" * 65
    signature = sign(body, ENV["OTHER_SECRET"]) if valid_signature else "sha256=" + "0" * 64
    response = post(listener, "/webhook/small", body, {DUCTILE: signature})
    assert response.status_code == 413
    assert response.json() == {"error": "payload too large"}
    assert not Job.objects.exists()


def test_the_default_max_body_size_is_one_mebibyte(listener: Client) -> None:
    assert DEFAULT_MAX_BODY_SIZE == 1024 * 1024
    exact = b"a" * DEFAULT_MAX_BODY_SIZE
    assert post(listener, "/webhook/github", exact, {HUB: sign(exact)}).status_code == 202
    over = exact + b"a"
    assert post(listener, "/webhook/github", over, {HUB: sign(over)}).status_code == 413
    assert Job.objects.count() == 1


@pytest.mark.parametrize(
    ("text", "size"),
    [("1MB", 1048576), ("512KB", 524288), ("64kb", 65536), ("2 mb", 2097152), ("100B", 100), ("7", 7), (4096, 4096)],
)
def test_sizes_are_read_in_binary_units(text: object, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["1.5MB", "1TB", "MB", "", "0", "0KB", 0, -1, True, None, "1 M B"])
def test_a_bad_size_is_refused(text: object) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


# -- paths and methods ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/webhook/unknown", "/webhook/github/", "/webhook", "/", "/admin/"])
def test_an_unknown_path_is_404_json_and_nothing_is_enqueued(listener: Client, path: str) -> None:
    response = post(listener, path, BODY, {HUB: sign(BODY)})
    assert response.status_code == 404
    assert response.json() == {"error": "not found"}
    assert listener.get(path).status_code == 404
    assert not Job.objects.exists()


@pytest.mark.parametrize("method", ["get", "put", "patch", "delete"])
def test_other_methods_on_an_endpoint_are_405_json(listener: Client, method: str) -> None:
    response = getattr(listener, method)("/webhook/github")
    assert response.status_code == 405
    assert response.json() == {"error": "method not allowed"}
    assert response["Allow"] == "POST"


def test_healthz_reports_the_spec_fields(listener: Client) -> None:
    post(listener, "/webhook/github", BODY, {HUB: sign(BODY)})
    response = listener.get("/healthz")
    assert response.status_code == 200
    health = response.json()
    assert health["status"] == "ok"
    assert health["queue_depth"] == 1
    assert health["plugins_loaded"] == len(RUNTIME.get().registry.instances)
    assert health["plugins_circuit_open"] == 0
    assert isinstance(health["uptime_seconds"], int)
    assert listener.post("/healthz").status_code == 405


def test_without_webhooks_yaml_the_listener_has_no_endpoints(config_dir: ConfigDir) -> None:
    """WEBHOOKS.md: "If webhooks.yaml is not included, the listener will start without endpoints"."""
    with installed_runtime(config_dir), override_settings(ROOT_URLCONF="gateway.http.webhooks.urls"):
        client = Client()
        assert post(client, "/webhook/github", BODY, {HUB: sign(BODY)}).status_code == 404
        assert client.get("/healthz").status_code == 200


# -- what the plugin receives ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "payload"),
    [
        (b'{"action": "opened", "pr": {"number": 7}}', {"action": "opened", "pr": {"number": 7}}),
        (b"[1, 2, 3]", {"value": [1, 2, 3]}),
        (b'"just a string"', {"value": "just a string"}),
        (b"token=abc&ref=main", {"value": "token=abc&ref=main"}),
        (b'{"n": NaN}', {"value": '{"n": NaN}'}),
        (b"", {}),
    ],
    ids=["json-object", "json-array", "json-string", "form-text", "nan-is-not-json", "empty"],
)
@pytest.mark.django_db(transaction=True)  # the jobs run on the worker's thread, on its own connection
def test_the_plugin_receives_the_body_as_a_webhook_trigger_event(
    listener: Client, body: bytes, payload: dict[str, Any]
) -> None:
    response = post(listener, "/webhook/github", body, {HUB: "sha256=" + sign(body)})
    assert response.status_code == 202
    job_id = response.json()["job_id"]
    run_until_idle(RUNTIME)
    job = Job.objects.get(pk=job_id)
    assert job.status == "succeeded"
    request = request_seen_by_plugin(job_id)
    assert request["command"] == "handle"
    assert request["event"]["type"] == "webhook.trigger"
    assert request["event"]["source"] == "webhook"
    assert request["event"]["payload"] == payload
    assert request["job_id"] == job_id


@pytest.mark.parametrize("body", [b'{"a": "x\\u0000y"}', b'{"x\\u0000": 1}', b"binary\x00body"])
def test_a_body_holding_nul_is_400_on_every_backend(listener: Client, body: bytes) -> None:
    """PostgreSQL's jsonb cannot hold NUL; SQLite could, but one rule serves both."""
    response = post(listener, "/webhook/github", body, {HUB: sign(body)})
    assert response.status_code == 400
    assert "must not contain NUL characters" in response.json()["error"]
    assert not Job.objects.exists()


def test_the_job_takes_the_plugins_retry_budget_and_names_the_endpoint(config_dir: ConfigDir, listener: Client) -> None:
    response = post(listener, "/webhook/github", BODY, {HUB: sign(BODY)})
    job = Job.objects.get(pk=response.json()["job_id"])
    assert job.max_attempts == RUNTIME.get().config.plugins["probe"].retry.max_attempts
    reason = JobTransition.objects.get(job_id=job.id).reason
    assert reason == "enqueued by webhook: endpoint github (/webhook/github)"


@pytest.fixture
def rejections(monkeypatch: pytest.MonkeyPatch) -> Refusals:
    """The listener's counter, its own as a fresh worker's; its interval ends when the test calls
    `flush()` (a timer's, on a shared CPU, could fall in the middle of a flood)."""
    counter = Refusals(WEBHOOK_DELIVERY, interval=3600)
    monkeypatch.setattr(views, "REFUSALS", counter)
    return counter


@pytest.fixture
def records() -> Iterator[list[logging.LogRecord]]:
    seen: list[logging.LogRecord] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    handler = Capture()
    log = logging.getLogger("ductile.webhooks")
    log.addHandler(handler)
    yield seen
    log.removeHandler(handler)


def test_rejections_are_logged_by_endpoint_and_reason_without_secret_or_signature(
    listener: Client, rejections: Refusals, records: list[logging.LogRecord]
) -> None:
    forged = "sha256=" + sign(BODY, "forged")
    post(listener, "/webhook/github", BODY, {HUB: forged})
    post(listener, "/webhook/github", BODY)
    post(listener, "/webhook/small", b"x" * 65, {DUCTILE: forged})
    rejections.flush()
    messages = [r.getMessage() for r in records]
    assert messages == [
        "rejected webhook delivery from 127.0.0.1: github: signature does not match (/webhook/github); "
        "more from it are counted, one line per 3600 s",
        "2 more rejected webhook deliveries from 127.0.0.1 in the last 3600 s "
        "(github: no X-Hub-Signature-256 header: 1, small: body over 64 bytes: 1; last on /webhook/small)",
    ]
    logged = " ".join(messages + [str(vars(r)) for r in records])
    assert SECRET not in logged and forged.removeprefix("sha256=") not in logged


def test_a_flood_of_forged_deliveries_is_a_line_or_two_and_a_count_system_status_reads(
    listener: Client, rejections: Refusals, records: list[logging.LogRecord]
) -> None:
    """Before: one warning per forged delivery, so anyone who could reach the port wrote the log
    as fast as it could post."""
    forged = "sha256=" + sign(BODY, "forged")
    statuses = {post(listener, "/webhook/github", BODY, {HUB: forged}).status_code for _ in range(300)}
    statuses |= {post(listener, "/webhook/small", b"x" * 65).status_code for _ in range(100)}
    assert statuses == {403, 413}
    assert len(records) == 1  # the first, at once; the rest wait for the interval's end
    rejections.flush()
    assert len(records) == 2 and records[1].failures == 399  # type: ignore[attr-defined]
    assert Job.objects.count() == 0
    tally = read_tally(WEBHOOK_DELIVERY.tally_path(RUNTIME.get().config.state_path))
    assert tally["failures"] == 400
    assert tally["sources"]["127.0.0.1"]["last_reason"] == "small: body over 64 bytes"
    out = io.StringIO()
    call_command("system", "status", "--json", stdout=out, stderr=io.StringIO())
    assert json.loads(out.getvalue())["webhook_rejections"]["failures"] == 400
    out = io.StringIO()
    call_command("system", "status", stdout=out, stderr=io.StringIO())
    assert "rejected webhook deliveries: 400 since " in out.getvalue()
    assert "last from 127.0.0.1" in out.getvalue() and "failed API authentications: none" in out.getvalue()


# -- config ---------------------------------------------------------------------------------------


def problems_of(cfg: ConfigDir, webhooks: str = WEBHOOKS, **env: str) -> list[ConfigProblem]:
    """What loading `webhooks` refuses (the runtime parses the endpoints once, at load)."""
    write_config(cfg, webhooks)
    try:
        build_runtime(cfg.path, {**os.environ, **ENV, **env})
    except ConfigError as exc:
        assert exc.exit_code == 78
        return list(exc.problems)
    return []


@pytest.mark.parametrize(
    ("webhooks", "key", "line", "message"),
    [
        (endpoint(plugin="nope"), "webhooks.endpoints[0].plugin", 5, "unknown plugin 'nope' (configured plugins: "),
        (endpoint(plugin=None), "webhooks.endpoints[0].plugin", 3, "missing required key 'plugin'"),
        (endpoint(command="frobnicate"), "webhooks.endpoints[0].command", 8, "plugin 'probe' has no command"),
        (endpoint(secret_ref=None), "webhooks.endpoints[0].secret_ref", 3, "missing required key 'secret_ref'"),
        (
            endpoint(secret_ref="nobody"),
            "webhooks.endpoints[0].secret_ref",
            6,
            "secret_ref 'nobody': tokens.yaml entry 'nobody' is not defined",
        ),
        (
            endpoint(signature_header=None),
            "webhooks.endpoints[0].signature_header",
            3,
            "missing required key 'signature_header'",
        ),
        (
            endpoint(signature_header="X_Hub_Signature"),
            "webhooks.endpoints[0].signature_header",
            7,
            "expected a header name of letters, digits and -",
        ),
        (endpoint(max_body_size="1.5MB"), "webhooks.endpoints[0].max_body_size", 8, "expected a size such as 1MB"),
        (endpoint(path="webhook/github"), "webhooks.endpoints[0].path", 4, "expected a URL path such as"),
        (endpoint(path="/healthz"), "webhooks.endpoints[0].path", 4, "/healthz is the listener's health endpoint"),
        (endpoint(comand="poll"), "webhooks.endpoints[0].comand", 8, "unknown key 'comand'"),
        (endpoint(secret="x"), "webhooks.endpoints[0].secret", 8, "an inline secret is not accepted"),
        ("webhooks:\n  listen: localhost\n", "webhooks.listen", 2, "expected host:port"),
        ("webhooks:\n  endpoints: {}\n", "webhooks.endpoints", 2, "{} is not of type 'array'"),
        ("webhooks:\n  endpoints:\n    - /hook\n", "webhooks.endpoints[0]", 3, "'/hook' is not of type 'object'"),
    ],
)
def test_a_bad_endpoint_refuses_the_config_naming_file_line_and_key(
    config_dir: ConfigDir, webhooks: str, key: str, line: int, message: str
) -> None:
    problems = problems_of(config_dir, webhooks)
    assert len(problems) == 1, problems
    (problem,) = problems
    assert problem.file == config_dir.path / "webhooks.yaml"
    assert (problem.key, problem.line) == (key, line), webhooks
    assert message in problem.message


def test_duplicate_paths_and_names_are_refused_naming_the_first(config_dir: ConfigDir) -> None:
    webhooks = """\
webhooks:
  - name: a
    path: /hook
    plugin: probe
    secret_ref: github_secret
    signature_header: X-Sig
  - name: b
    path: /hook
    plugin: probe
    secret_ref: github_secret
    signature_header: X-Sig
  - name: a
    path: /other
    plugin: probe
    secret_ref: github_secret
    signature_header: X-Sig
"""
    problems = problems_of(config_dir, webhooks)
    assert [(p.key, p.line, p.message) for p in problems] == [
        ("webhooks.endpoints[1].path", 8, "path '/hook' is already used by webhooks.endpoints[0]"),
        ("webhooks.endpoints[2].name", 12, "name 'a' is already used by webhooks.endpoints[0]"),
    ]


def test_a_trailing_slash_names_the_same_path(config_dir: ConfigDir) -> None:
    """`/hook` and `/hook/` are one path (the original's conflict check trims the slash): the
    second is refused at its line instead of both being served."""
    webhooks = """\
webhooks:
  - name: a
    path: /hook
    plugin: probe
    secret_ref: github_secret
    signature_header: X-Sig
  - name: b
    path: /hook/
    plugin: probe
    secret_ref: github_secret
    signature_header: X-Sig
"""
    problems = problems_of(config_dir, webhooks)
    assert [(p.key, p.line, p.message) for p in problems] == [
        ("webhooks.endpoints[1].path", 8, "path '/hook/' is already used by webhooks.endpoints[0]"),
    ]


def test_an_empty_secret_is_refused_naming_its_variable(config_dir: ConfigDir) -> None:
    (problem,) = problems_of(config_dir, WEBHOOK_SECRET="")
    assert problem.key == "webhooks.endpoints[0].secret_ref"
    assert "tokens.yaml entry 'github_secret' has an empty key (is its ${VAR} set?)" in problem.message


def test_every_problem_is_reported_at_once(config_dir: ConfigDir) -> None:
    """What the schema refuses (with the rest of the config's schema problems) comes first; what
    an endpoint refers to (plugin, command, secret) is checked on an endpoint the schema passed."""
    problems = problems_of(config_dir, endpoint(path="hook", signature_header="X_Sig", max_body_size=0, secret=1))
    assert [p.key for p in problems] == [
        "webhooks.endpoints[0].max_body_size",
        "webhooks.endpoints[0].path",
        "webhooks.endpoints[0].secret",
        "webhooks.endpoints[0].signature_header",
    ]
    problems = problems_of(config_dir, endpoint(plugin="nope", secret_ref="nobody"))
    assert [p.key for p in problems] == ["webhooks.endpoints[0].plugin", "webhooks.endpoints[0].secret_ref"]


def test_the_list_form_keeps_the_listen_address_of_config_yaml(config_dir: ConfigDir) -> None:
    """Configuration Specification §4.3 writes `webhooks:` as a list; WEBHOOKS.md puts `listen` in
    config.yaml. Merged, the list becomes the endpoints beside `listen` instead of replacing it."""
    listed = textwrap.dedent(
        """\
        webhooks:
          - name: github
            path: /webhook/github
            plugin: probe
            secret_ref: github_secret
            signature_header: X-Hub-Signature-256
        """
    )
    write_config(config_dir, listed, listen="127.0.0.1:8091")
    runtime = build_runtime(config_dir.path, {**os.environ, **ENV})
    webhooks = runtime.webhooks
    assert str(webhooks.listen) == "127.0.0.1:8091"
    (hook,) = webhooks.by_path.values()
    assert (hook.name, hook.plugin, hook.command, hook.max_body_size) == ("github", "probe", "handle", 1048576)
    assert hook.secret == SECRET and SECRET not in repr(hook)
    assert runtime.config.problem(("webhooks", "endpoints", 0, "plugin"), "x").line == 4


def test_a_webhooks_yaml_with_every_endpoint_commented_out_has_none(config_dir: ConfigDir) -> None:
    """An empty section means "nothing set", as for `plugins:`; it is not a type error."""
    write_config(config_dir, "webhooks:\n  # - name: github\n")
    runtime = build_runtime(config_dir.path, {**os.environ, **ENV})
    assert runtime.webhooks == Webhooks()


def test_a_bad_webhooks_yaml_refuses_the_whole_runtime(config_dir: ConfigDir) -> None:
    """webhooks.yaml is high security: the gateway does not start on a bad one (exit 78)."""
    write_config(config_dir, endpoint(plugin="nope"))
    with pytest.raises(ConfigError) as caught:
        build_runtime(config_dir.path, {**os.environ, **ENV})
    assert [p.key for p in caught.value.problems] == ["webhooks.endpoints[0].plugin"]
