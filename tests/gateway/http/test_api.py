"""The HTTP API in-process (DRF test client, real config, real queue): discovery, the token and
scope rules, the triggers and the job queries, every error as JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import blake3
import pytest
from rest_framework.test import APIClient

from gateway import intake
from gateway.runtime import RUNTIME
from ledger.models import EventContext, Job
from ledger.models.jobs import AttemptOutcome
from ledger.submitters import Submitter
from tests.support.runtime import installed_runtime

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

TOKENS = {
    "admin": ["*"],
    "reader": ["jobs:ro"],
    "plugin-ro": ["plugin:ro"],
    "echo-rw": ["echo:rw"],
    "runner": ["plugin:rw", "jobs:ro"],
    # The original's finer scopes, each alone or with jobs:result:ro.
    "status": ["jobs:status:ro"],
    "status-result": ["jobs:status:ro", "jobs:result:ro"],
    "tree": ["jobs:tree:ro"],
    "logs": ["jobs:logs:ro"],
    "logs-result": ["jobs:logs:ro", "jobs:result:ro"],
    "catalog": ["plugin:catalog:ro"],
}


@pytest.fixture
def api(config_dir):
    config_dir.extra["api"] = {
        "enabled": True,
        "auth": {"tokens": [{"name": n, "token": f"tok-{n}", "scopes": s} for n, s in TOKENS.items()]},
    }
    scopes = config_dir.file("scopes/ci.json", json.dumps({"scopes": ["read:jobs", "write:events"]}))
    good_hash = "blake3:" + blake3.blake3(scopes.read_bytes()).hexdigest()
    config_dir.extra["tokens"] = [
        {"name": "ci", "key": "tok-ci", "scopes_file": "scopes/ci.json", "scopes_hash": good_hash},
        {"name": "tampered", "key": "tok-tampered", "scopes_file": "scopes/ci.json", "scopes_hash": "blake3:00"},
        {"name": "hook-secret", "key": "s3cret"},
    ]
    config_dir.extra["pipelines"] = [
        {"name": "flow", "on": "flow.start", "steps": [{"id": "a", "uses": "echo"}]},
        {
            "name": "fan",
            "on": "fan.start",
            "execution_mode": "synchronous",
            "steps": [{"split": [{"uses": "echo"}, {"uses": "probe"}]}],
        },
        {
            "name": "bag",
            "on": "bag.start",
            "steps": [{"id": "fetch", "uses": "echo", "baggage": {"web.url": "payload.url"}}],
        },
    ]
    with installed_runtime(config_dir):
        yield APIClient()


def as_(client, name):
    client.credentials(HTTP_AUTHORIZATION=f"Bearer tok-{name}")
    return client


@pytest.mark.parametrize("path", ["/", "/healthz", "/plugins", "/skills", "/.well-known/ai-plugin.json"])
def test_discovery_is_open(api, path):
    response = api.get(path)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("application/json")


def test_discovery_contents(api):
    assert api.get("/").json()["discovery"]["openapi"] == "/openapi.json"
    plugins = {p["name"]: p for p in api.get("/plugins").json()["plugins"]}
    assert "poll" in plugins["echo"]["commands"]
    skills = {s["name"]: s for s in api.get("/skills").json()["skills"]}
    assert skills["plugin.echo.health"]["tier"] == "READ" and skills["plugin.echo.handle"]["tier"] == "WRITE"
    assert skills["plugin.echo.poll"]["tier"] == "WRITE"  # as the original's echo declares it
    assert skills["pipeline.flow"]["execution_mode"] == "asynchronous"
    assert skills["pipeline.fan"]["execution_mode"] == "synchronous"
    health = api.get("/healthz").json()
    assert health["status"] == "ok" and health["plugins_circuit_open"] == 0 and health["queue_depth"] == 0


def test_healthz_counts_queued_and_running_jobs_and_names_the_command_it_runs_as(api):
    """`queue_depth` is outstanding work, as the original's /healthz counts it (queued + running);
    `binary_path` (000's API reference) is the `ductile` command, which a process not started by
    `system start` takes to be its own entry point, else the script beside its interpreter."""
    runtime = RUNTIME.get()
    for message in ("one", "two", "three"):
        intake.submit_ids(runtime, [intake.job(runtime, Submitter.API, "echo", "poll", {"message": message})])
    job = Job.objects.claim_next(worker_id="w", caps=runtime.claim_caps(), lease_ttl=60)
    assert job is not None
    job.record_outcome(AttemptOutcome("succeeded", response_text="{}"), worker="w", default_dedupe_ttl=0)
    assert Job.objects.claim_next(worker_id="w", caps=runtime.claim_caps(), lease_ttl=60) is not None
    health = api.get("/healthz").json()
    assert health["queue_depth"] == 2  # one queued, one running; the succeeded one is not outstanding
    assert health["binary_path"] == str(Path(sys.executable).parent / "ductile")  # pytest is no entry point


@pytest.mark.parametrize(
    ("header", "code"),
    [(None, 401), ("Bearer nope", 401), ("Basic tok-admin", 401), ("Bearer", 401), ("Bearer tok-tampered", 401)],
)
def test_missing_malformed_unknown_or_refused_tokens_are_401(api, header, code):
    if header:
        api.credentials(HTTP_AUTHORIZATION=header)
    response = api.get("/jobs")
    assert response.status_code == code
    assert set(response.json()) == {"error"}


def test_a_tampered_scope_file_refuses_that_token_and_says_why(api):
    problems = RUNTIME.get().tokens.problems
    assert any("'tampered'" in p and "does not match scopes_hash" in p for p in problems)
    assert all("tok-" not in p for p in problems)  # secrets never appear in messages


@pytest.mark.parametrize(
    ("token", "method", "path", "code"),
    [
        ("reader", "get", "/jobs", 200),
        ("ci", "get", "/jobs", 200),  # `read:jobs` in a registry scope file
        ("plugin-ro", "get", "/jobs", 403),
        ("reader", "post", "/plugin/echo/poll", 403),
        ("plugin-ro", "post", "/plugin/echo/health", 202),  # health is a read command
        ("plugin-ro", "post", "/plugin/echo/poll", 403),  # echo's poll writes, as in the original
        ("plugin-ro", "post", "/plugin/echo/handle", 403),  # handle writes
        ("echo-rw", "post", "/plugin/echo/handle", 202),  # per-plugin write scope
        ("echo-rw", "post", "/plugin/echo/health", 202),  # ...which implies its read
        ("echo-rw", "post", "/plugin/probe/handle", 403),
        ("echo-rw", "get", "/plugin/echo", 200),
        ("plugin-ro", "get", "/plugin/echo", 200),
        ("reader", "get", "/plugin/echo", 403),
        ("runner", "post", "/pipeline/flow", 202),
        ("plugin-ro", "post", "/pipeline/flow", 403),
        ("runner", "get", "/analytics/queue", 403),
        ("admin", "get", "/analytics/queue", 200),
        ("admin", "get", "/analytics/summary", 200),
    ],
)
def test_scope_matrix(api, token, method, path, code):
    as_(api, token)
    response = getattr(api, method)(path, {"payload": {}} if method == "post" else None, format="json")
    assert response.status_code == code, response.content
    if code >= 400:
        assert set(response.json()) == {"error"}


def test_plugin_trigger_enqueues_one_job_as_the_api(api):
    as_(api, "admin")
    response = api.post("/plugin/echo/handle", {"payload": {"message": "hi"}}, format="json")
    assert response.status_code == 202
    body = response.json()
    assert (body["status"], body["plugin"], body["command"]) == ("queued", "echo", "handle")
    job = Job.objects.get(pk=body["job_id"])
    assert (job.submitted_by, job.payload) == ("api", {"message": "hi"})
    assert job.event is not None
    assert job.event["type"] == "api.trigger" and job.event["payload"] == {"message": "hi"}
    detail = api.get(f"/job/{job.id}").json()
    assert detail["status"] == "queued" and detail["result"] is None
    assert [j["job_id"] for j in api.get(f"/job/{job.id}/tree").json()] == [job.id]


def test_a_deduplicated_trigger_answers_the_earlier_jobs_real_status(api):
    """New-7: a deduplicated POST answered `"status": "queued"` for a job that had succeeded."""
    as_(api, "admin")
    first = api.post("/plugin/echo/poll", {"dedupe_key": "once"}, format="json").json()
    runtime = RUNTIME.get()
    job = Job.objects.claim_next(worker_id="w", caps=runtime.claim_caps(), lease_ttl=60)
    assert job is not None and job.id == first["job_id"]
    job.record_outcome(AttemptOutcome("succeeded"), worker="w", default_dedupe_ttl=3600)
    again = api.post("/plugin/echo/poll", {"dedupe_key": "once"}, format="json")
    assert again.status_code == 202
    assert again.json() == {
        "job_id": first["job_id"],
        "status": "succeeded",
        "plugin": "echo",
        "command": "poll",
        "deduplicated": True,
    }
    blank = api.post("/plugin/echo/poll", {"dedupe_key": "   "}, format="json").json()  # item 12: no key
    assert "deduplicated" not in blank and Job.objects.get(pk=blank["job_id"]).dedupe_key is None


@pytest.mark.parametrize(
    ("path", "body", "code", "words"),
    [
        ("/plugin/nope/poll", {}, 404, "plugin 'nope' does not exist: the configured plugins are"),
        ("/plugin/echo/nope", {}, 404, "has no command 'nope' (it has: poll,"),
        ("/plugin/echo/poll", {"payload": [1]}, 400, "payload: must be a JSON object"),
        ("/plugin/echo/poll", "not json", 400, "JSON"),
        ("/pipeline/nope", {}, 404, "no callable pipeline named 'nope'"),
        ("/pipeline/fan", {}, 400, "needs exactly one"),
    ],
)
def test_trigger_errors_are_json_with_the_reason(api, path, body, code, words):
    as_(api, "admin")
    if isinstance(body, str):
        response = api.generic("POST", path, body, content_type="application/json")
    else:
        response = api.post(path, body, format="json")
    assert response.status_code == code, response.content
    answer = response.json()
    assert words in (answer["detail"] if code == 404 else answer["error"])
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("method", "path", "error"),
    [
        ("get", "/job/unknown", "job not found"),
        ("get", "/job/unknown/tree", "job not found"),
        ("get", "/plugin/nope", "plugin not found"),
        ("get", "/plugin/nope/openapi.json", "plugin not found"),
        ("get", "/stopwatch/nope", "plugin not found"),
        ("post", "/plugin/nope/poll", "plugin not found"),
        ("post", "/plugin/echo/nope", "command not supported by plugin"),
        ("post", "/pipeline/nope", "pipeline not found"),
    ],
)
def test_404s_say_what_the_originals_say_and_which_one_beside(api, method, path, error):
    """A client of the original compares `error` with its words; `detail` keeps ours (which one)."""
    response = getattr(as_(api, "admin"), method)(path, {}, format="json")
    assert response.status_code == 404
    answer = response.json()
    assert answer["error"] == error
    assert "'nope'" in answer["detail"] or "'unknown'" in answer["detail"]


@pytest.mark.parametrize("path", ["/plugin/echo/poll", "/pipeline/flow"])
@pytest.mark.parametrize(
    "content_type",
    # curl -d sends the form type; some clients send none; the original decodes JSON regardless.
    [None, "application/json", "application/x-www-form-urlencoded", "text/plain"],
)
def test_triggers_read_a_json_body_whatever_its_content_type(api, path, content_type):
    as_(api, "admin")
    body = json.dumps({"payload": {"message": "typed"}})
    extra = {} if content_type is None else {"CONTENT_TYPE": content_type}
    response = api.generic("POST", path, body, **extra)
    assert response.status_code == 202, response.content
    job = Job.objects.get(pk=response.json()["job_id"])
    assert job.payload == {"message": "typed"}


@pytest.mark.parametrize(
    ("body", "words"),
    [("payload=hi", "JSON parse error"), ('["a list"]', "must be a JSON object"), ("", None)],
)
def test_a_form_typed_body_that_is_not_a_json_object_is_a_400(api, body, words):
    as_(api, "admin")
    response = api.generic("POST", "/plugin/echo/poll", body, content_type="application/x-www-form-urlencoded")
    if words is None:  # no body at all: an empty request, as with JSON
        assert response.status_code == 202, response.content
        return
    assert response.status_code == 400, response.content
    assert words in response.json()["error"]
    assert Job.objects.count() == 0


def test_a_trigger_whose_payload_lacks_an_entry_claims_source_is_refused_and_enqueues_nothing(api):
    """Spec 000, baggage rules: "Missing source paths fail the job or trigger." Before, the API
    answered 202 and the job was recorded dead (conformance gap 87)."""
    as_(api, "admin")
    refused = api.post("/pipeline/bag", {"payload": {"title": "no url"}}, format="json")
    assert refused.status_code == 400
    assert refused.json()["error"] == (
        "pipeline 'bag' step 'fetch': baggage web.url: source payload.url is missing (claims are never skipped); "
        "nothing was enqueued"
    )
    assert not Job.objects.exists() and not EventContext.objects.exists()
    accepted = api.post("/pipeline/bag", {"payload": {"url": "https://example.org"}}, format="json")
    assert accepted.status_code == 202
    job = Job.objects.get(id=accepted.json()["job_id"])
    assert EventContext.objects.get(id=job.event_context_id).accumulated_json["web"] == {"url": "https://example.org"}


def test_a_trigger_whose_claims_would_pass_the_context_cap_is_a_413_with_the_sizes(api):
    """Item 89: a context over the 1 MiB cap was a 400 with words only; the original answers 413
    with `bytes_actual` and `bytes_limit`, and writes nothing."""
    as_(api, "admin")
    refused = api.post("/pipeline/bag", {"payload": {"url": "u" * (1024 * 1024)}}, format="json")
    assert refused.status_code == 413, refused.content
    body = refused.json()
    assert body["bytes_limit"] == 1024 * 1024 and body["bytes_actual"] > body["bytes_limit"]
    assert "over the 1 MiB cap; nothing was enqueued" in body["error"]
    assert not Job.objects.exists() and not EventContext.objects.exists()


def test_async_pipeline_trigger_and_the_async_override(api):
    as_(api, "admin")
    body = api.post("/pipeline/flow", {"payload": {"x": 1}}, format="json").json()
    assert body["status"] == "queued" and body["command"] == "flow"
    fan = api.post("/pipeline/fan?async=true", {}, format="json")
    assert fan.status_code == 202 and len(fan.json()["job_ids"]) == 2


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("", 200),
        ("?status=pending", 200),
        ("?status=ok&plugin=echo", 200),
        ("?status=bogus", 400),
        ("?limit=0", 400),
        ("?limit=x", 400),
    ],
)
def test_jobs_filters_validate(api, query, code):
    as_(api, "admin")
    api.post("/plugin/echo/poll", {}, format="json")
    response = api.get(f"/jobs{query}")
    assert response.status_code == code, response.content
    if query == "?status=pending":
        assert response.json()["total"] == 1 and response.json()["jobs"][0]["status"] == "queued"


@pytest.mark.parametrize(
    ("query", "code"),
    [("", 200), ("?from=2026-01-01T00:00:00Z", 200), ("?from=yesterday", 400), ("?limit=201", 400), ("?query=x", 200)],
)
def test_job_logs_filters_validate(api, query, code):
    as_(api, "admin")
    assert api.get(f"/job-logs{query}").status_code == code


def test_job_logs_search_finds_what_it_shows_never_a_piece_of_a_secret(api):
    """`query` matches the texts as they are shown, secrets replaced: a piece of a token finds
    nothing (else an auditor could grow it a character at a time), the words around it do."""
    failed_attempt(error="refused", result_error="signed with s3cret", stderr="signed in with tok-admin as admin")
    as_(api, "reader")
    for piece in ("tok-admi", "ok-adm", "s3cre"):
        assert api.get(f"/job-logs?query={piece}").json() == {"logs": [], "total": 0}, piece
    found = api.get("/job-logs?query=signed in with").json()
    assert found["total"] == 1 and found["logs"][0]["stderr"] == "signed in with [REDACTED] as admin"
    assert api.get("/job-logs?query=signed with&include_result=true").json()["logs"][0]["result"] == {
        "status": "error",
        "error": "signed with [REDACTED]",
    }


def test_unknown_paths_and_methods_are_json(api):
    response = api.get("/no/such/thing")
    assert response.status_code == 404 and "error" in response.json()
    as_(api, "admin")
    response = api.delete("/jobs")
    assert response.status_code == 405 and "error" in response.json()


# -- the original's finer scopes -------------------------------------------------------------


@pytest.fixture
def finished(api):
    """One failed attempt, with a result, an error and stderr: what only `jobs:result:ro` shows."""
    return failed_attempt(error="MARKER-error", result_error="MARKER-result", stderr="MARKER-stderr")


def failed_attempt(*, error: str, result_error: str, stderr: str) -> str:
    """An echo job whose one attempt failed with these texts, recorded as a worker records it."""
    runtime = RUNTIME.get()
    (job_id,) = intake.submit_ids(runtime, [intake.job(runtime, Submitter.API, "echo", "poll", {})])
    job = Job.objects.claim_next(worker_id="w", caps=runtime.claim_caps(), lease_ttl=60)
    assert job is not None and job.id == job_id
    said = AttemptOutcome(
        "failed",
        error=error,
        retryable=False,
        response_text=json.dumps({"status": "error", "error": result_error}),
        stderr=stderr,
    )
    job.record_outcome(said, worker="w", default_dedupe_ttl=0)
    return job_id


@pytest.mark.parametrize(
    ("token", "opens"),
    [
        ("status", {"/jobs", "/job/{id}", "/stopwatch/echo"}),
        ("status-result", {"/jobs", "/job/{id}", "/stopwatch/echo"}),
        ("tree", {"/job/{id}/tree"}),
        ("logs", {"/job-logs"}),
        ("catalog", {"/plugin/echo"}),
        ("reader", {"/jobs", "/job/{id}", "/stopwatch/echo", "/job/{id}/tree", "/job-logs"}),
        ("plugin-ro", {"/plugin/echo", "/topology"}),
    ],
)
def test_each_finer_scope_opens_its_reads_and_no_other(api, finished, token, opens):
    """jobs:status:ro reads jobs' state, jobs:tree:ro trees, jobs:logs:ro attempts, plugin:catalog:ro
    manifests; the broad jobs:ro and plugin:ro keep everything they opened."""
    reads = ["/jobs", "/job/{id}", "/stopwatch/echo", "/job/{id}/tree", "/job-logs", "/plugin/echo", "/topology"]
    as_(api, token)
    for path in reads:
        code = api.get(path.replace("{id}", finished)).status_code
        assert code == (200 if path in opens else 403), (token, path, code)


RESULT_FIELDS = {"result", "last_error", "stderr"}


def test_only_jobs_result_ro_shows_what_a_plugin_wrote(api, finished):
    """Status, tree and log readers see the rows without result, last_error and stderr (the keys
    are absent, as in the original's answers); with jobs:result:ro (or jobs:ro) they are there."""

    def keys(token, path):
        answer = as_(api, token).get(path.replace("{id}", finished))
        assert answer.status_code == 200, (token, path, answer.content)
        body = answer.json()
        rows = body["logs"] if "logs" in body else body if isinstance(body, list) else [body]
        assert rows and all(row["job_id"] == finished and row["status"] == "failed" for row in rows)
        assert "MARKER" not in json.dumps(body) or RESULT_FIELDS & set(rows[0]), body
        return set().union(*map(set, rows))

    for token, path in [("status", "/job/{id}"), ("tree", "/job/{id}/tree"), ("logs", "/job-logs?include_result=true")]:
        assert not RESULT_FIELDS & keys(token, path), (token, path)
    assert {"result", "last_error"} <= keys("status-result", "/job/{id}")
    assert keys("logs-result", "/job-logs?include_result=true") >= RESULT_FIELDS
    assert keys("reader", "/job-logs?include_result=true") >= RESULT_FIELDS
    assert {"result", "last_error"} <= keys("reader", "/job/{id}/tree")
    shown = as_(api, "logs-result").get("/job-logs?include_result=true").json()["logs"][0]
    assert (shown["last_error"], shown["stderr"], shown["result"]["error"]) == (
        "MARKER-error",
        "MARKER-stderr",
        "MARKER-result",
    )


def test_a_log_reader_without_results_cannot_search_them(api, finished):
    """`query` searches last_error, stderr and the result: matches would tell, one by one, what the
    token may not read."""
    refused = as_(api, "logs").get("/job-logs?query=MARKER")
    assert refused.status_code == 403 and "jobs:result:ro" in refused.json()["error"]
    assert as_(api, "logs-result").get("/job-logs?query=MARKER-stderr").json()["total"] == 1


def test_the_catalog_scope_reads_manifests_but_invokes_nothing(api):
    as_(api, "catalog")
    assert api.get("/plugin/echo").status_code == 200
    assert api.post("/plugin/echo/health", {}, format="json").status_code == 403  # a read command
    assert as_(api, "plugin-ro").post("/plugin/echo/health", {}, format="json").status_code == 202  # spec 000
