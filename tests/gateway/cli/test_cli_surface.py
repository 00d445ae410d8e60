"""The CLI surface an agent enumerates and drives (issue 35): NOUN ACTION help, legacy §11.6
spellings, `--output json`, job id prefixes, new read verbs. In-process through `call_command`
unless the behaviour is the console script's own (its help and its aliases)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from ledger.models import Job
from ledger.models.telemetry import JobStopwatch
from tests.support.checkout import REPO
from tests.support.processes import cli_env, ductile
from tests.support.runtime import installed_runtime


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code: Any = 0
    try:
        call_command(*args, stdout=out, stderr=err)
    except SystemExit as exc:
        code = exc.code
    return int(code or 0), out.getvalue(), err.getvalue()


def enqueue(job_id: str) -> str:
    """An echo job whose id is `job_id` (ids are random: a shared prefix is made, not waited for)."""
    from ledger.models import JobSpec
    from ledger.submitters import Submitter

    made = Job.objects.enqueue(JobSpec("echo", "poll", Submitter.CLI), default_dedupe_ttl=60).job_id
    Job.objects.filter(pk=made).update(id=job_id)
    return job_id


@pytest.mark.postgres
@pytest.mark.django_db
def test_read_commands_take_output_json_as_their_json(runtime):
    """Spec 000 idiom 8 spells it `--output json`; the Handbook `--json`: both give the JSON."""
    enqueue("cea25d41-0000-4000-8000-000000000001")
    code, out, _ = run("job", "logs", "--output", "json")
    assert code == 0 and json.loads(out) == {"logs": [], "total": 0}
    code, out, _ = run("job", "inspect", "cea25d41-0000-4000-8000-000000000001", "--output", "json")
    assert code == 0 and json.loads(out)["status"] == "queued"
    code, out, _ = run("pipeline", "list", "--output", "json")
    assert code == 0 and json.loads(out)["pipelines"] == []
    code, out, _ = run("job", "logs", "--output", "text")
    assert code == 0 and out.strip() == "(0 of 0)"


@pytest.mark.postgres
@pytest.mark.django_db
def test_job_verbs_take_a_unique_id_prefix_and_refuse_an_ambiguous_one(runtime):
    first = enqueue("cea25d41-0000-4000-8000-000000000001")
    second = enqueue("cea25d41-0000-4000-8000-000000000002")
    lone = enqueue("0badf00d-0000-4000-8000-000000000003")
    code, out, _ = run("job", "inspect", "0badf00d", "--json")
    assert code == 0 and json.loads(out)["job_id"] == lone
    code, out, _ = run("job", "cancel", "0BADF00D", "--dry-run", "--json")  # as printed, or typed in capitals
    assert code == 0 and json.loads(out)["job_id"] == lone
    code, out, _ = run("job", "inspect", "cea25d41-0000-4000-8000-000000000002", "--json")
    assert code == 0 and json.loads(out)["job_id"] == second

    code, out, err = run("job", "inspect", "cea25d41")
    assert code == 2 and first in err and second in err and "give more of the id" in err
    code, out, _ = run("job", "retry", "cea25d41", "--json")
    assert code == 2 and json.loads(out)["matches"] == [second, first]

    code, _, err = run("job", "inspect", "feedbeef")
    assert code == 1 and "no job with id 'feedbeef', nor one whose id starts with it" in err
    code, _, err = run("job", "inspect", "cea%")  # LIKE's wildcard is not a prefix
    assert code == 1 and "hex digits and dashes" in err


def console_script(cfg: Any, *args: str) -> subprocess.CompletedProcess[str]:
    """The `ductile` console script itself (tests.support.processes.ductile runs manage.py, Django's whole set)."""
    script = "import sys; from gateway.cli.main import main; sys.exit(main(['ductile', *sys.argv[1:]]))"
    return subprocess.run(
        [sys.executable, "-c", script, *args, "--config-dir", str(cfg.path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=cli_env(cfg),
        cwd=REPO,
    )


@pytest.mark.process
def test_console_script_offers_the_noun_action_surface_and_django_under_its_own_noun(config_dir):
    config_dir.write()
    shown = console_script(config_dir, "--help")
    assert shown.returncode == 0
    listed = {line.split()[0] for line in shown.stdout.split("Legacy")[0].splitlines() if line.startswith("  ")}
    assert listed == {"admin", "api", "config", "event", "job", "mcp", "pipeline", "plugin", "relay", "schedule"} | {
        "skills",
        "stopwatch",
        "system",
        "version",
    }
    assert "flush" not in shown.stdout and "qcluster" not in shown.stdout and "ductile django COMMAND" in shown.stdout

    flush = console_script(config_dir, "flush", "--no-input")
    assert flush.returncode == 2 and "Django's own commands are `ductile django flush`" in flush.stderr
    assert console_script(config_dir, "nonsense").returncode == 2
    django_help = console_script(config_dir, "django", "help")
    assert django_help.returncode == 0 and "flush" in django_help.stdout and "qcluster" in django_help.stdout
    assert "Type 'ductile django help <subcommand>'" in django_help.stdout  # what works (re-audit N6)
    flush_help = console_script(config_dir, "django", "help", "flush")
    assert flush_help.stdout.startswith("usage: ductile django flush"), flush_help.stdout
    # What the gateway's messages name, and its daemons: still there, unlisted.
    migrate = console_script(config_dir, "migrate")
    assert migrate.returncode == 0, migrate.stderr
    assert console_script(config_dir, "runworkers", "--once").returncode == 0
    assert "claim queued jobs" in console_script(config_dir, "help", "runworkers").stdout
    # manage.py, which the supervisor starts the daemons with, keeps all of Django's.
    assert "--no-input" in ductile(config_dir, "flush", "--help").stdout


@pytest.mark.process
def test_legacy_section_11_6_spellings_run_the_noun_action_commands(config_dir):
    config_dir.write()
    ran = console_script(config_dir, "run", "echo", "--json")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["status"] == "succeeded" and json.loads(ran.stdout)["plugin"] == "echo"
    status = json.loads(console_script(config_dir, "status", "--json").stdout)
    assert status["queue"]["succeeded"] == 1 and "plugins_loaded" in status
    plugins = json.loads(console_script(config_dir, "plugins", "--json").stdout)
    assert "echo" in {p["name"] for p in plugins["plugins"]}
    logs = json.loads(console_script(config_dir, "logs", "echo", "--json").stdout)
    assert [entry["plugin"] for entry in logs["logs"]] == ["echo"]
    assert json.loads(console_script(config_dir, "logs", "stress", "--json").stdout)["logs"] == []
    queue = console_script(config_dir, "queue", "--json")
    assert queue.returncode == 0 and json.loads(queue.stdout)["queue"]["succeeded"] == 1


def test_pipeline_list_gives_each_pipeline_a_blake3_fingerprint(config_dir):
    """Item 55: the original prints `blake3:<hex>` for each compiled pipeline; one that changes
    changes its own fingerprint only."""
    steps = [{"id": "one", "uses": "echo"}, {"id": "two", "uses": "echo"}]
    config_dir.extra["pipelines"] = [
        {"name": "alpha", "on": "x.alpha", "steps": steps},
        {"name": "beta", "on": "x.beta", "steps": steps},
    ]
    with installed_runtime(config_dir):
        code, out, _ = run("pipeline", "list", "--json")
    before = json.loads(out)
    assert code == 0 and before["fingerprint"].startswith("blake3:")
    prints = {p["name"]: p["fingerprint"] for p in before["pipelines"]}
    assert all(len(f) == len("blake3:") + 64 and f.startswith("blake3:") for f in prints.values())
    assert prints["alpha"] != prints["beta"]  # their triggers differ

    config_dir.extra["pipelines"][1] = {"name": "beta", "on": "x.beta", "steps": [*steps, {"uses": "echo"}]}
    with installed_runtime(config_dir):
        after = json.loads(run("pipeline", "list", "--json")[1])
    changed = {p["name"]: p["fingerprint"] for p in after["pipelines"]}
    assert changed["alpha"] == prints["alpha"] and changed["beta"] != prints["beta"]
    assert after["fingerprint"] != before["fingerprint"]
    with installed_runtime(config_dir):
        shown = json.loads(run("pipeline", "show", "beta", "--json")[1])
    assert shown["fingerprint"] == changed["beta"]


def test_plugin_manifest_shows_what_the_manifest_declares(runtime):
    """new-14: `plugin manifest NAME` (spec 000's plugin development guide), for a configured
    plugin and for one only discovered; an unknown name lists the known ones."""
    code, out, _ = run("plugin", "manifest", "echo", "--json")
    shown = json.loads(out)
    assert code == 0 and shown["name"] == "echo" and shown["manifest"] == "echo"
    assert shown["protocol"] == 2 and shown["file"].endswith("plugins/echo/manifest.yaml")
    assert {"poll", "health"} <= {c["name"] for c in shown["commands"]}
    assert all(c["type"] in ("read", "write") for c in shown["commands"])
    assert shown["manifest_hash"].startswith("blake3:")
    code, out, _ = run("plugin", "manifest", "sys_exec")  # discovered, not configured
    assert code == 0 and out.startswith("sys_exec ") and "commands:" in out
    code, _, err = run("plugin", "manifest", "nope")
    assert code == 2 and "no plugin named 'nope'" in err and "echo" in err


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)  # the live server's thread reads on its own connection
def test_plugin_list_api_url_lists_a_running_gateways_plugins(runtime, live_server):
    """As the original's `plugin list --api-url URL`: the gateway's own GET /plugins."""
    code, out, _ = run("plugin", "list", "--api-url", live_server.url, "--json")
    assert code == 0
    listed = json.loads(out)
    assert [p["name"] for p in listed["plugins"]] == sorted(runtime.get().registry.instances)
    assert set(listed["plugins"][0]) == {"name", "version", "description", "commands"}
    code, out, _ = run("plugin", "list", "--api-url", live_server.url)
    assert code == 0 and out.splitlines()[0].split() == ["NAME", "VERSION", "COMMANDS"]
    assert any(line.startswith("echo ") for line in out.splitlines())

    code, out, _ = run("plugin", "list", "--api-url", "http://127.0.0.1:9", "--json")  # nothing listens there
    assert code == 1 and json.loads(out)["error"].startswith("cannot reach http://127.0.0.1:9/plugins")


@pytest.mark.postgres
@pytest.mark.django_db
def test_system_plugin_facts_shows_a_plugins_newest_facts_first(runtime):
    """Item 49, as the original's `system plugin-facts PLUGIN [--fact-type T] [--limit N]`."""
    for _ in range(2):  # two runs from one process: as two CLI runs that got the same pid
        ran = run("plugin", "run", "py-greet")
        assert ran[0] == 0, ran  # its poll records a py-greet.snapshot fact
    code, out, _ = run("system", "plugin-facts", "py-greet", "--json")
    shown = json.loads(out)
    assert code == 0 and shown["plugin"] == "py-greet" and "fact_type" not in shown
    assert [f["seq"] for f in shown["facts"]] == [2, 1]
    assert {f["fact_type"] for f in shown["facts"]} == {"py-greet.snapshot"}
    assert all(f["command"] == "poll" and f["job_id"] and isinstance(f["fact"], dict) for f in shown["facts"])
    assert [
        f["seq"] for f in json.loads(run("system", "plugin-facts", "py-greet", "--limit", "1", "--json")[1])["facts"]
    ] == [2]
    code, out, _ = run("system", "plugin-facts", "py-greet", "--fact-type", "other.kind")
    assert code == 0 and out.splitlines() == [
        "Plugin facts for py-greet",
        "Fact type filter: other.kind",
        "No facts found.",
    ]
    code, _, err = run("system", "plugin-facts", "nope")
    assert code == 2 and "unknown plugin 'nope' (configured: echo, probe, py-greet, stress)" in err
    with pytest.raises(CommandError, match="limit must be greater than zero"):
        run("system", "plugin-facts", "py-greet", "--limit", "0")


def stopwatch_row(plugin: str, status: str, age: timedelta, step: str | None = None) -> int:
    now = timezone.now()
    row = JobStopwatch.objects.create(
        job_id="cea25d41-0000-4000-8000-000000000001",
        plugin=plugin,
        command="poll",
        step_name=step,
        enter_wall_ns=0,
        exit_wall_ns=1,
        dur_ns=1,
        status=status,
        created_at=now - age,
    )
    return row.id


@pytest.mark.postgres
@pytest.mark.django_db
def test_stopwatch_prune_deletes_old_rows_matching_its_filters(runtime):
    """The original's `stopwatch prune --older-than DUR [--plugin] [--step] [--status] [--dry-run]`."""
    old_echo = stopwatch_row("echo", "ok", timedelta(days=10))
    stopwatch_row("echo", "ok", timedelta(days=10), step="greet")
    stopwatch_row("stress", "err", timedelta(days=10))
    fresh = stopwatch_row("echo", "ok", timedelta(hours=1))

    code, out, _ = run("stopwatch", "prune", "--older-than", "7d", "--dry-run", "--json")
    report = json.loads(out)
    assert code == 0 and report["affected"] == 3 and report["dry_run"] is True
    assert JobStopwatch.objects.count() == 4
    code, out, _ = run("stopwatch", "prune", "--older-than", "7d", "--plugin", "echo", "--step", "greet")
    assert code == 0 and out.startswith("deleted 1 job_stopwatch row(s) older than ") and "step=greet" in out
    code, out, _ = run("stopwatch", "prune", "--older-than", "1w", "--status", "err", "--json")
    assert json.loads(out)["affected"] == 1
    assert set(JobStopwatch.objects.values_list("id", flat=True)) == {old_echo, fresh}
    with pytest.raises(CommandError, match="expected a duration"):
        run("stopwatch", "prune", "--older-than", "soon")
    with pytest.raises(CommandError, match="older-than"):
        run("stopwatch", "prune")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)  # the live server's thread reads on its own connection
def test_plugin_run_api_url_enqueues_through_a_running_gateways_api(config_dir, live_server, monkeypatch):
    """As the original's `plugin run NAME --api-url URL --api-key KEY`: the gateway's
    POST /plugin/NAME/COMMAND enqueues the job; the CLI prints the API's answer."""
    config_dir.extra["api"] = {"auth": {"tokens": [{"name": "admin", "token": "tok-admin", "scopes": ["*"]}]}}
    monkeypatch.delenv("DUCTILE_API_KEY", raising=False)
    monkeypatch.delenv("DUCTILE_TOKEN", raising=False)
    with installed_runtime(config_dir):
        code, out, _ = run(
            "plugin", "run", "echo", "--api-url", live_server.url, "--api-key", "tok-admin",
            "--payload", '{"message": "remote"}', "--json",
        )  # fmt: skip
        answer = json.loads(out)
        assert code == 0 and answer["status"] == "queued" and answer["plugin"] == "echo"
        job = Job.objects.get(pk=answer["job_id"])
        assert job.submitted_by == "api" and job.payload == {"message": "remote"}

        code, _, err = run("plugin", "run", "echo", "--api-url", live_server.url)
        assert code == 2 and "an API key is needed" in err
        code, _, err = run("plugin", "run", "echo", "--api-url", live_server.url, "--api-key", "wrong")
        assert code == 1 and "answered 401" in err and Job.objects.count() == 1
