"""The bundled `file_watch` plugin, run through the runtime as a real process on temporary files:
its baseline, transitions, fingerprints, dedupe keys, facts and refusals (issue 34; the original
Ductile plugin's contract and spec 000 "Plugin Facts")."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ledger.models import Job, PluginFact, PluginState
from ledger.states import JobStatus
from tests.support.config_dirs import ConfigDir
from tests.support.jobs import last_response, run_job
from tests.support.processes import ductile_json
from tests.support.runtime import installed_runtime

# Real commits: the jobs run on the worker daemon's thread (run_until_idle), on a connection of its own.
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

OLD = time.time() - 3600  # an mtime well past any min_stable_age below


def write(path: Path, text: str, mtime: float | None = OLD) -> Path:
    path.write_text(text)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def watch(path: Path, **keys: Any) -> dict[str, Any]:
    return {"id": "cfg", "path": str(path), "event_type": "config.changed", **keys}


@contextmanager
def watching(config_dir: ConfigDir, *watches: dict[str, Any]) -> Iterator[Any]:
    config_dir.plugins["file_watch"] = {"config": {"watches": list(watches)}}
    with installed_runtime(config_dir) as runtime:
        yield runtime


def poll(runtime: Any) -> dict[str, Any]:
    job = run_job(runtime, "file_watch")
    assert job.status == JobStatus.SUCCEEDED, job.last_error
    response: dict[str, Any] = last_response(job)
    return response


def events(response: dict[str, Any]) -> list[dict[str, Any]]:
    return list(response.get("events", []))


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def target(tmp_path: Path) -> Path:
    return write(tmp_path / "app.yaml", "version: 1\n")


def test_first_poll_is_a_baseline_then_modified_and_deleted_with_the_original_payloads(config_dir, target):
    with watching(config_dir, watch(target)) as runtime:
        first = poll(runtime)
        assert events(first) == [] and first["result"] == "file_watch poll complete: watches=1 events=0"
        assert poll(runtime).get("events") is None
        write(target, "version: 2\n")
        stat = target.stat()
        [modified] = events(poll(runtime))
        target.unlink()
        [deleted] = events(poll(runtime))
    assert modified["payload"].pop("changed_at").endswith("+00:00") and deleted["payload"].pop("changed_at")
    fingerprint = sha("version: 2\n")
    assert modified == {
        "type": "config.changed",
        "payload": {
            "watch_id": "cfg",
            "path": str(target),
            "change_type": "modified",
            "fingerprint": fingerprint,
            "size": stat.st_size,
            "mtime_ns": stat.st_mtime_ns,
        },
        "dedupe_key": f"file_watch:cfg:{fingerprint}",
    }
    assert deleted == {
        "type": "config.changed",
        "payload": {
            "watch_id": "cfg",
            "path": str(target),
            "change_type": "deleted",
            "previous_fingerprint": fingerprint,
        },
        "dedupe_key": f"file_watch:cfg:deleted:{fingerprint}",
    }


def test_a_file_that_appears_is_created_and_emit_initial_reports_one_there_at_the_start(config_dir, tmp_path, target):
    later = tmp_path / "later.yaml"
    with watching(config_dir, watch(later), watch(target, id="initial", emit_initial=True)) as runtime:
        [initial] = events(poll(runtime))
        assert (initial["payload"]["watch_id"], initial["payload"]["change_type"]) == ("initial", "created")
        write(later, "hello")
        [created] = events(poll(runtime))
    assert (created["payload"]["watch_id"], created["payload"]["change_type"]) == ("cfg", "created")
    assert created["dedupe_key"] == f"file_watch:cfg:{sha('hello')}"


def test_each_strategy_sees_its_own_kind_of_change(config_dir, target):
    """sha256 (file_watch's default) sees a rewrite that keeps size and mtime; mtime_size sees a
    touch that keeps the content."""
    with watching(config_dir, watch(target, id="content"), watch(target, id="stat", strategy="mtime_size")) as runtime:
        poll(runtime)
        write(target, "version: 9\n")  # same size, mtime put back
        rewritten = events(poll(runtime))
        os.utime(target, (OLD + 60, OLD + 60))
        touched = events(poll(runtime))
    assert [e["payload"]["watch_id"] for e in rewritten] == ["content"]
    assert [e["payload"]["watch_id"] for e in touched] == ["stat"]
    stat = target.stat()
    assert touched[0]["payload"]["fingerprint"] == f"{stat.st_mtime_ns}:{stat.st_size}"
    assert touched[0]["dedupe_key"] == f"file_watch:stat:{stat.st_mtime_ns}:{stat.st_size}"


def test_emit_deleted_false_stays_quiet_and_a_returning_file_is_created(config_dir, target):
    with watching(config_dir, watch(target, emit_deleted="no")) as runtime:
        poll(runtime)
        target.unlink()
        assert events(poll(runtime)) == []
        assert PluginState.current("file_watch")["watches"]["cfg"]["exists"] is False
        write(target, "version: 1\n")
        [event] = events(poll(runtime))
    assert event["payload"]["change_type"] == "created"


def test_min_stable_age_holds_back_a_file_still_being_written(config_dir, target):
    with watching(config_dir, watch(target, min_stable_age=30)) as runtime:
        poll(runtime)
        write(target, "version: 2 (half", mtime=None)
        held = poll(runtime)
        assert events(held) == []
        assert any("cfg: file not stable yet" in log["message"] for log in held["logs"])
        assert PluginState.current("file_watch")["watches"]["cfg"]["fingerprint"] == sha("version: 1\n")
        os.utime(target, (OLD + 5, OLD + 5))
        [event] = events(poll(runtime))
    assert event["payload"]["change_type"] == "modified"


def test_a_change_seen_again_routes_once_within_the_dedupe_window(config_dir, target):
    """sha256 keys are the content's: back to a version already handled, no second handling."""
    config_dir.routes = [{"from": "file_watch", "event_type": "config.changed", "to": "echo"}]
    with watching(config_dir, watch(target)) as runtime:
        poll(runtime)
        write(target, "version: 2\n")
        poll(runtime)
        write(target, "version: 1\n")
        poll(runtime)
        write(target, "version: 2\n")
        [again] = events(poll(runtime))
    keys = list(Job.objects.filter(plugin="echo").order_by("created_at").values_list("dedupe_key", flat=True))
    two, one = sha("version: 2\n"), sha("version: 1\n")
    assert keys == [f"file_watch:cfg:{two}", f"file_watch:cfg:{one}"]
    assert again["dedupe_key"] == keys[0]


def test_every_poll_records_a_file_watch_snapshot_fact_in_the_spec_shape(config_dir, target, tmp_path):
    missing = tmp_path / "missing.yaml"
    with watching(config_dir, watch(target), watch(missing, id="gone")) as runtime:
        poll(runtime)
        poll(runtime)
    facts = list(PluginFact.objects.filter(plugin_name="file_watch").order_by("seq"))
    assert [f.fact_type for f in facts] == ["file_watch.snapshot"] * 2
    assert PluginState.current("file_watch") == facts[1].fact_json
    snapshot = facts[1].fact_json
    assert set(snapshot) == {"watches", "last_poll_at"}
    entry = snapshot["watches"]["cfg"]
    assert set(entry) == {"exists", "fingerprint", "size", "mtime_ns", "path", "strategy", "updated_at"}
    assert (entry["exists"], entry["fingerprint"], entry["size"], entry["path"], entry["strategy"]) == (
        True,
        sha("version: 1\n"),
        11,
        str(target),
        "sha256",
    )
    assert {k: v for k, v in snapshot["watches"]["gone"].items() if k != "updated_at"} == {
        "exists": False,
        "path": str(missing),
    }


def test_health_names_a_watch_it_cannot_watch(config_dir, tmp_path, target):
    with watching(config_dir, watch(target), watch(tmp_path / "nowhere" / "x.yaml", id="lost")) as runtime:
        job = run_job(runtime, "file_watch", command="health", max_attempts=1)
    assert job.status == JobStatus.FAILED
    assert job.last_error == f"file_watch health failed: lost: parent directory does not exist: {tmp_path / 'nowhere'}"
    with watching(config_dir, watch(target)) as runtime:
        job = run_job(runtime, "file_watch", command="health")
    assert last_response(job)["result"] == "file_watch health OK (watches=1)"


@pytest.mark.process
def test_bad_config_is_refused_at_load_naming_file_line_and_key(config_dir, target):
    config_dir.extra = {"api": {"enabled": False}}
    config_dir.plugins["file_watch"] = {
        "config": {"watches": [{"id": "cfg", "event_type": "x", "strategy": "crc32", "emit_deleted": "maybe"}]}
    }
    config_dir.write()
    code, body = ductile_json(config_dir, "config", "check", "--strict")
    assert code == 78
    errors = {e["key"]: e for e in body["errors"]}
    assert set(errors) == {
        "plugins.file_watch.config.watches[0].path",
        "plugins.file_watch.config.watches[0].strategy",
        "plugins.file_watch.config.watches[0].emit_deleted",
    }
    assert all(e["file"] == str(config_dir.path / "config.yaml") and e["line"] for e in errors.values())
    assert (
        "expected true or false, got 'maybe'" in errors["plugins.file_watch.config.watches[0].emit_deleted"]["message"]
    )


def test_a_config_the_load_did_not_check_is_refused_by_the_plugin_without_retry(config_dir, target):
    """What the plugin says itself (a gateway without config_schema, or duplicate ids, which a
    schema cannot see): the original's words, every problem, no retry."""
    with watching(config_dir, watch(target), watch(target)) as runtime:
        job = run_job(runtime, "file_watch", max_attempts=3)
    assert job.status == JobStatus.FAILED and job.attempt == 1
    assert job.last_error == "invalid file_watch config: duplicate watch id: cfg"
