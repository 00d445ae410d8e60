"""The bundled `file_handler` plugin (spec 000 "Deployment Guide" and the playlist cookbook), run as
a real plugin process: the cookbook's pipeline writes its summary to `{video_id}.md`, reads come
back, and nothing outside the granted directories is touched, symlinks included."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from ledger.models import Job
from ledger.states import JobStatus
from ledger.submitters import Submitter
from tests.support.config_dirs import ConfigDir
from tests.support.jobs import jobs_by_step, last_response, run_jobs, run_until_idle
from tests.support.processes import ductile_json
from tests.support.runtime import load_runtime

# Real commits: the jobs run on the worker daemon's thread (run_until_idle), on a connection of its own.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    made = {name: tmp_path / name for name in ("outputs", "inputs", "elsewhere")}
    for path in made.values():
        path.mkdir()
    return made


def handler(config_dir: ConfigDir, dirs: dict[str, Path], **extra: Any) -> Any:
    # The deployment guide's config, with its ${HOME} paths pointed at the test's directories.
    config_dir.plugins["file_handler"] = {
        "timeout": "30s",
        "max_attempts": 1,
        "config": {
            "allowed_read_paths": f"{dirs['inputs']}:{dirs['outputs']}",
            "allowed_write_paths": str(dirs["outputs"]),
            "default_output_dir": str(dirs["outputs"]),
            **extra,
        },
    }
    return load_runtime(config_dir)


def emitted(job: Job) -> list[dict[str, Any]]:
    return list(last_response(job).get("events") or [])


def test_the_cookbook_pipeline_writes_the_summary_to_video_id_md_and_a_listener_hears_of_it(config_dir, dirs):
    from gateway.intake.events import publish_event

    config_dir.plugins["fabric"] = {"uses": "probe"}
    config_dir.plugins["notify"] = {"uses": "probe"}
    config_dir.extra["pipelines"] = [
        {"name": "playlist-wisdom", "on": "summary.ready", "steps": [{"id": "write", "uses": "file_handler"}]},
        {"name": "announce", "on": "file_handler.written", "steps": [{"id": "notify", "uses": "notify"}]},
    ]
    holder = handler(config_dir, dirs)
    summary = "# Talk\n\nThree points.\n"
    publish_event(holder.get(), "summary.ready", {"video_id": "dQw4w9", "result": summary}, submitter=Submitter.CLI)
    run_until_idle(holder)

    write = jobs_by_step("playlist-wisdom")["write"]
    assert write.status == JobStatus.SUCCEEDED, write.last_error
    target = dirs["outputs"] / "dQw4w9.md"
    assert target.read_text() == summary
    assert last_response(write)["result"] == str(target)
    [event] = emitted(write)
    assert event == {
        "type": "file_handler.written",
        "payload": {
            "path": str(target),
            "bytes": len(summary.encode()),
            "sha256": hashlib.sha256(summary.encode()).hexdigest(),
            "created": True,
        },
    }
    notify = jobs_by_step("announce")["notify"]
    heard = last_response(notify)["result"]["request"]["event"]
    assert heard["type"] == "file_handler.written" and heard["payload"]["path"] == str(target)
    assert [p.name for p in dirs["outputs"].iterdir()] == ["dQw4w9.md"]  # no temporary left behind


def test_writes_follow_output_path_output_dir_and_filename_and_reads_come_back(config_dir, dirs):
    (dirs["inputs"] / "notes.txt").write_text("hello\n")
    holder = handler(config_dir, dirs)
    sub = dirs["outputs"] / "2026" / "nov"
    by_path, in_dir, by_job, structured, read = run_jobs(
        holder,
        [
            ("file_handler", "handle", {"content": "a", "output_path": str(dirs["outputs"] / "a.txt")}),
            ("file_handler", "write", {"text": "b", "output_dir": str(sub), "filename": "b.md"}),
            ("file_handler", "handle", {"result": "c"}),
            ("file_handler", "handle", {"result": {"score": 3}, "filename": "d.json"}),
            ("file_handler", "handle", {"action": "read", "path": str(dirs["inputs"] / "notes.txt")}),
        ],
    )
    assert all(job.status == JobStatus.SUCCEEDED for job in (by_path, in_dir, by_job, structured, read))
    assert (dirs["outputs"] / "a.txt").read_text() == "a"
    assert (sub / "b.md").read_text() == "b"  # missing directories under a granted root are made
    assert (dirs["outputs"] / f"{by_job.id}.md").read_text() == "c"
    assert (dirs["outputs"] / "d.json").read_text() == '{\n  "score": 3\n}\n'
    assert last_response(read)["result"] == "hello\n"
    [event] = emitted(read)
    assert event["type"] == "file_handler.read"
    assert event["payload"] == {"path": str(dirs["inputs"] / "notes.txt"), "content": "hello\n", "bytes": 6}


def test_nothing_outside_the_granted_directories_is_read_or_written_symlinks_included(config_dir, dirs):
    secret = dirs["elsewhere"] / "secret.txt"
    secret.write_text("s3cret")
    (dirs["outputs"] / "escape").symlink_to(dirs["elsewhere"])
    (dirs["inputs"] / "link.txt").symlink_to(secret)
    (dirs["outputs"] / "victim.md").symlink_to(dirs["elsewhere"] / "planted.md")
    holder = handler(config_dir, dirs, overwrite=True)
    cases = [
        ({"content": "x", "output_path": str(dirs["elsewhere"] / "x.md")}, "is outside allowed_write_paths"),
        ({"content": "x", "output_path": "../elsewhere/x.md"}, "is outside allowed_write_paths"),
        ({"content": "x", "output_dir": str(dirs["outputs"] / "escape"), "filename": "x.md"}, "outside"),
        ({"content": "x", "filename": "../x.md"}, "must be a plain file name"),
        ({"action": "read", "path": str(secret)}, "is outside allowed_read_paths"),
        ({"action": "read", "path": str(dirs["inputs"] / "link.txt")}, "is outside allowed_read_paths"),
        ({"output_path": str(dirs["outputs"] / "empty.md")}, "nothing to write"),
        ({"action": "delete", "path": str(secret)}, "is not read or write"),
    ]
    jobs = run_jobs(holder, [("file_handler", "handle", payload) for payload, _ in cases])
    for job, (payload, words) in zip(jobs, cases, strict=True):
        assert job.status != JobStatus.SUCCEEDED, payload
        assert words in (job.last_error or ""), (payload, job.last_error)
    # A symlink already at the target name is replaced, never written through.
    [replaced] = run_jobs(holder, [("file_handler", "handle", {"content": "mine", "filename": "victim.md"})])
    assert replaced.status == JobStatus.SUCCEEDED, replaced.last_error
    assert not (dirs["outputs"] / "victim.md").is_symlink() and (dirs["outputs"] / "victim.md").read_text() == "mine"
    assert sorted(os.listdir(dirs["elsewhere"])) == ["secret.txt"]


def test_a_write_without_allowed_write_paths_is_refused_and_overwrite_false_keeps_the_file(config_dir, dirs):
    config_dir.plugins["locked"] = {"uses": "file_handler", "config": {"default_output_dir": str(dirs["outputs"])}}
    (dirs["outputs"] / "keep.md").write_text("old")
    holder = handler(config_dir, dirs, overwrite=False)
    ungranted, kept = run_jobs(
        holder,
        [("locked", "handle", {"content": "x"}), ("file_handler", "handle", {"content": "new", "filename": "keep.md"})],
    )
    assert "allowed_write_paths is not configured" in (ungranted.last_error or "")
    assert "exists and overwrite is false" in (kept.last_error or "")
    assert (dirs["outputs"] / "keep.md").read_text() == "old"
    assert list(dirs["outputs"].iterdir()) == [dirs["outputs"] / "keep.md"]


@pytest.mark.process
def test_health_names_a_default_output_dir_outside_the_granted_paths(config_dir, dirs):
    config_dir.plugins["bad"] = {
        "uses": "file_handler",
        "config": {"allowed_write_paths": str(dirs["outputs"]), "default_output_dir": str(dirs["elsewhere"])},
    }
    holder = handler(config_dir, dirs)
    good, bad = run_jobs(holder, [("file_handler", "health", None), ("bad", "health", None)])
    assert good.status == JobStatus.SUCCEEDED
    assert f"default_output_dir {dirs['elsewhere']} is outside allowed_write_paths" in (bad.last_error or "")
    code, body = ductile_json(config_dir, "plugin", "list")
    row = {r["name"]: r for r in body["plugins"]}["file_handler"]
    assert code == 0 and row["commands"] == ["handle", "write", "read", "health"]
