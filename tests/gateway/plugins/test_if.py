"""The bundled `if` classifier (spec 000 §8), run as a real plugin process through the runtime:
the spec's own `check_youtube` config, each check, first match wins, the default, the payload
and dedupe key passed through, and the refusals that are never retried."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.models import Job
from ledger.states import JobStatus
from ledger.submitters import Submitter
from tests.support.config_dirs import ConfigDir
from tests.support.jobs import jobs_by_step, last_response, run_job, run_jobs, run_until_idle
from tests.support.processes import ductile_json
from tests.support.runtime import load_runtime

# Real commits: the jobs run on the worker daemon's thread (run_until_idle), on a connection of its own.
pytestmark = pytest.mark.django_db(transaction=True)

# Spec 000, cookbook "Route YouTube vs Web URLs", as printed, with §8.4's `uses: if`: the
# classifier is an alias of the bundled plugin. The spec's other three plugins are not bundled;
# here they are aliases of the test plugin `probe`, which answers with the request it was sent.
SPEC_PLUGINS = """\
plugins:
  check_youtube:
    uses: if
    enabled: true
    timeout: 30s
    max_attempts: 1
    config:
      field: text
      checks:
        - contains: "youtu.be"
          emit: youtube.url.detected
        - contains: "youtube.com"
          emit: youtube.url.detected
        - startswith: "http"
          emit: web.url.detected
        - default: text.received
  youtube_transcript: {uses: probe}
  fabric: {uses: probe}
  file_handler: {uses: probe}
"""
SPEC_PIPELINES = """\
pipelines:
  - name: ai-dispatch
    on: discord.ai.command
    steps:
      - id: classify
        uses: check_youtube
  - name: youtube-wisdom
    on: youtube.url.detected
    steps:
      - uses: youtube_transcript
      - uses: fabric
      - uses: file_handler
  - name: web-summarize
    on: web.url.detected
    steps:
      - uses: fabric
"""


def spec_config(config_dir: ConfigDir) -> ConfigDir:
    config_dir.file("plugins.yaml", SPEC_PLUGINS)
    config_dir.file("pipelines.yaml", SPEC_PIPELINES)
    config_dir.extra = {"include": ["plugins.yaml", "pipelines.yaml"], "api": {"enabled": False}}
    config_dir.write()
    return config_dir


def classifiers(config_dir: ConfigDir, *configs: dict[str, Any]) -> Any:
    """One `if` alias per config (c0, c1, ...), loaded at once: one runtime for a whole table."""
    for number, config in enumerate(configs):
        config_dir.plugins[f"c{number}"] = {"uses": "if", "config": config}
    return load_runtime(config_dir)


def emitted(job: Job) -> list[dict[str, Any]]:
    return list(last_response(job).get("events") or [])


@pytest.mark.process
def test_the_specs_check_youtube_config_passes_the_strict_check_and_is_listed(config_dir):
    spec_config(config_dir)
    code, body = ductile_json(config_dir, "config", "check", "--strict")
    assert (code, body["errors"], body["warnings"]) == (0, [], [])
    code, body = ductile_json(config_dir, "plugin", "list")
    row = {r["name"]: r for r in body["plugins"]}["check_youtube"]
    assert (row["uses"], row["state"], row["commands"]) == ("if", "enabled", ["handle", "health", "init"])
    assert row["health"] == "unknown"  # until a gateway has run its init


def test_the_specs_pipelines_route_each_text_as_the_spec_says(config_dir):
    from gateway.intake.events import publish_event

    holder = load_runtime(spec_config(config_dir))
    seen: set[str] = set()
    for text, pipeline, steps in [
        ("watch https://YOUTU.BE/abc please", "youtube-wisdom", 3),  # contains, case-insensitive
        ("https://www.youtube.com/watch?v=abc", "youtube-wisdom", 3),
        ("http://example.com/post", "web-summarize", 1),
        ("just some words", None, 0),  # the default: text.received, which no pipeline takes
    ]:
        payload = {"text": text, "author": {"id": 7}}
        publish_event(holder.get(), "discord.ai.command", payload, submitter=Submitter.CLI)
        run_until_idle(holder)
        [classify] = jobs_by_step("ai-dispatch", exclude=seen).values()
        assert classify.status == JobStatus.SUCCEEDED
        [event] = emitted(classify)
        assert event["payload"] == payload, text  # passed through unchanged, nothing added
        routed = {name: jobs_by_step(name, exclude=seen) for name in ("youtube-wisdom", "web-summarize")}
        seen |= {classify.id} | {j.id for jobs in routed.values() for j in jobs.values()}
        assert {name: len(jobs) for name, jobs in routed.items()} == {
            "youtube-wisdom": steps if pipeline == "youtube-wisdom" else 0,
            "web-summarize": steps if pipeline == "web-summarize" else 0,
        }, text
        if pipeline is None:
            assert event["type"] == "text.received"
            continue
        assert all(j.status == JobStatus.SUCCEEDED for j in routed[pipeline].values())
        first = min(routed[pipeline].values(), key=lambda j: j.route_depth)
        received = last_response(first)["result"]["request"]["event"]
        assert received["type"] == event["type"]
        assert {k: v for k, v in received["payload"].items() if not k.startswith("ductile_")} == payload


CHECK_TABLE: list[tuple[dict[str, Any], Any, bool]] = [
    ({"contains": "TUBE"}, "youtube", True),
    ({"contains": "tube"}, "YOU", False),
    ({"startswith": "HTTP"}, "http://x", True),
    ({"startswith": "x"}, "http://x", False),
    ({"endswith": ".pdf"}, "Report.PDF", True),
    ({"endswith": ".pdf"}, "report.pdf.txt", False),
    ({"equals": "error"}, "ERROR", True),
    ({"equals": "error"}, "errors", False),
    ({"equals": "Straße"}, "STRASSE", True),  # casefold, not lower()
    ({"equals": 200}, 200, True),  # YAML numbers compare as their text
    ({"equals": "true"}, True, True),
    ({"regex": "[0-9]{3}"}, "123", True),
    ({"regex": "[0-9]{3}"}, "1234", False),  # fullmatch: the whole value
    ({"regex": "[a-z]+"}, "ABC", False),  # regex is case-sensitive
    ({"regex": "(?i)[a-z]+"}, "ABC", True),  # Python re syntax, as spec 000 §8.2 says
]


def test_each_check(config_dir):
    configs = ({"field": "v", "checks": [{**check, "emit": "hit"}, {"default": "miss"}]} for check, _, _ in CHECK_TABLE)
    holder = classifiers(config_dir, *configs)
    jobs = run_jobs(holder, [(f"c{n}", "handle", {"v": value}) for n, (_, value, _) in enumerate(CHECK_TABLE)])
    for job, (check, value, matches) in zip(jobs, CHECK_TABLE, strict=True):
        assert [e["type"] for e in emitted(job)] == ["hit" if matches else "miss"], (check, value)


def test_checks_run_in_order_and_the_first_match_wins(config_dir):
    checks = [{"contains": "b", "emit": "second"}, {"contains": "a", "emit": "first"}, {"default": "none"}]
    holder = classifiers(config_dir, {"field": "text", "checks": checks})
    job = run_job(holder, "c0", "handle", payload={"text": "ab"})
    assert [e["type"] for e in emitted(job)] == ["second"]
    assert last_response(job)["result"] == "check #1 (contains 'b') matched text -> second"


def test_the_field_is_a_path_and_missing_values_are_empty(config_dir):
    checks = [{"equals": "hello", "emit": "hit"}, {"equals": "cli.trigger", "emit": "typed"}, {"default": "empty"}]
    table = [
        ("source.text", {"source": {"text": "Hello"}}, "hit"),  # a dotted path into the payload
        ("payload.source.text", {"source": {"text": "Hello"}}, "hit"),
        ("source.missing", {"source": {"text": "Hello"}}, "empty"),  # missing is the empty string
        ("text", {"text": None}, "empty"),
        ("event.type", {}, "typed"),  # the event's own fields
    ]
    holder = classifiers(config_dir, *({"field": field, "checks": checks} for field, _, _ in table))
    jobs = run_jobs(holder, [(f"c{n}", "handle", payload) for n, (_, payload, _) in enumerate(table)])
    for job, (field, _, expected) in zip(jobs, table, strict=True):
        assert [e["type"] for e in emitted(job)] == [expected], field


def test_the_input_dedupe_key_goes_with_the_emitted_event(config_dir):
    config_dir.extra["pipelines"] = [{"name": "after", "on": "hit", "steps": [{"id": "look", "uses": "probe"}]}]
    holder = classifiers(config_dir, {"field": "text", "checks": [{"contains": "x", "emit": "hit"}]})
    job = run_job(holder, "c0", "handle", payload={"text": "x"}, dedupe_key="discord:summary:123")
    [event] = emitted(job)
    assert event["dedupe_key"] == "discord:summary:123"
    [look] = jobs_by_step("after").values()
    assert look.dedupe_key == "discord:summary:123"


def test_no_match_and_no_default_fails_at_once_without_retry(config_dir):
    holder = classifiers(config_dir, {"field": "text", "checks": [{"contains": "x", "emit": "hit"}]})
    job = run_job(holder, "c0", "handle", payload={"text": "nope"}, max_attempts=4)
    assert (job.status, job.attempt) == (JobStatus.FAILED, 1)
    assert job.last_error == "no checks matched and no default provided (text = 'nope')"
    assert not Job.objects.filter(parent_job_id=job.id).exists()


REFUSALS = [
    ([], "config.checks must be a non-empty list"),
    ("contains: x", "config.checks must be a non-empty list"),
    (["contains"], "check #1 must be a mapping, got str"),
    ([{"emit": "a"}], "check #1 must name exactly one of contains, startswith, endswith, equals, regex, default"),
    ([{"contains": "a", "equals": "b", "emit": "c"}], "(found: contains, equals)"),
    ([{"contains": "a"}], "check #1 (contains) needs an `emit` event type"),
    ([{"contains": " ", "emit": "a"}], "check #1 (contains) needs a value to compare with"),
    ([{"default": "a"}, {"regex": "(", "emit": "b"}], "check #2 has an invalid regex '('"),
]


def test_a_config_that_cannot_classify_fails_without_retry(config_dir):
    holder = classifiers(config_dir, *({"field": "text", "checks": checks} for checks, _ in REFUSALS))
    last = f"c{len(REFUSALS) - 1}"
    table: list[tuple[str, str, Any]] = [(f"c{n}", "health", None) for n in range(len(REFUSALS))]
    # handle and init refuse a config the same way (the last one, though it even holds a default)
    table += [(last, "handle", {"text": "x"}), (last, "init", None)]
    jobs = run_jobs(holder, table, max_attempts=4)
    for job, (checks, words) in zip(jobs, [*REFUSALS, REFUSALS[-1], REFUSALS[-1]], strict=True):
        assert (job.status, job.attempt) == (JobStatus.FAILED, 1), (job.command, checks)
        assert words in (job.last_error or ""), (job.command, checks, job.last_error)


def test_health_says_what_it_checked(config_dir):
    holder = classifiers(config_dir, {"field": "text", "checks": [{"contains": "a", "emit": "b"}, {"default": "c"}]})
    job = run_job(holder, "c0", "health")
    assert job.status == JobStatus.SUCCEEDED
    assert last_response(job)["result"] == "config ok: 2 checks on text"


def test_an_instance_without_field_or_checks_is_not_loaded(config_dir):
    config_dir.plugins["classify"] = {"uses": "if", "config": {"checks": [{"default": "a"}]}}
    holder = load_runtime(config_dir)
    skipped = holder.get().registry.skipped["classify"]
    assert skipped == "missing required config keys field (manifest config_keys.required)"
