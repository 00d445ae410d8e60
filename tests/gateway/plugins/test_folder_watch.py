"""The bundled `folder_watch` plugin, run through the runtime as a real process on temporary
directories: its baseline, changes, fingerprints, globs, limits, facts and refusals (issue 34; the
original Ductile plugin's contract, spec 000 "Plugin Facts" and the Cookbook's Astro recipe)."""

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
from tests.support.jobs import jobs_by_step, last_response, run_job
from tests.support.processes import ductile_json
from tests.support.runtime import installed_runtime

# Real commits: the jobs run on the worker daemon's thread (run_until_idle), on a connection of its own.
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

OLD = time.time() - 3600  # an mtime well past any min_stable_age below


def write(path: Path, text: str, mtime: float | None = OLD) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def watch(root: Path, **keys: Any) -> dict[str, Any]:
    return {"id": "docs", "root": str(root), "event_type": "docs.changed", **keys}


@contextmanager
def watching(config_dir: ConfigDir, *watches: dict[str, Any], name: str = "folder_watch") -> Iterator[Any]:
    config_dir.plugins[name] = {"uses": "folder_watch", "config": {"watches": list(watches)}}
    with installed_runtime(config_dir) as runtime:
        yield runtime


def poll(runtime: Any, name: str = "folder_watch") -> dict[str, Any]:
    job = run_job(runtime, name)
    assert job.status == JobStatus.SUCCEEDED, job.last_error
    response: dict[str, Any] = last_response(job)
    return response


def events(response: dict[str, Any]) -> list[dict[str, Any]]:
    return list(response.get("events", []))


def messages(response: dict[str, Any]) -> str:
    return "\n".join(f"{log['level']}: {log['message']}" for log in response["logs"])


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    write(root / "a.md", "alpha")
    write(root / "sub" / "b.md", "bravo")
    return root


# -- baseline, created, modified, deleted --------------------------------------------------------


def test_the_first_poll_is_a_baseline_then_changes_are_one_aggregate_event(config_dir, tree):
    with watching(config_dir, watch(tree)) as runtime:
        first = poll(runtime)
        assert events(first) == [] and "baseline of 2 file(s)" in messages(first)
        assert poll(runtime).get("events") is None  # nothing changed
        write(tree / "c.md", "charlie")
        write(tree / "a.md", "alpha, edited", mtime=OLD + 5)
        (tree / "sub" / "b.md").unlink()
        response = poll(runtime)
    [event] = events(response)
    snapshot = PluginState.current("folder_watch")["watches"]["docs"]
    assert event["type"] == "docs.changed"
    assert event["payload"] == {
        "watch_id": "docs",
        "root": str(tree),
        "created": ["c.md"],
        "modified": ["a.md"],
        "deleted": ["sub/b.md"],
        "changed_count": 3,
        "snapshot_hash": snapshot["snapshot_hash"],
        "payload_capped": False,
        "state_truncated": False,
    }
    assert event["dedupe_key"] == f"folder_watch:docs:{snapshot['snapshot_hash']}"
    assert response["result"] == "folder_watch poll complete: watches=1 events=1"


def test_emit_initial_reports_every_file_as_created_on_the_first_poll(config_dir, tree):
    with watching(config_dir, watch(tree, emit_initial=True)) as runtime:
        [event] = events(poll(runtime))
    assert event["payload"]["created"] == ["a.md", "sub/b.md"] and event["payload"]["changed_count"] == 2


def test_each_strategy_sees_its_own_kind_of_change(config_dir, tree):
    """sha256 sees a rewrite that keeps size and mtime; mtime_size (folder_watch's default) sees a
    touch that keeps the content."""
    by_content = watch(tree, id="content", strategy="sha256")
    by_stat = watch(tree, id="stat")
    with watching(config_dir, by_content, by_stat) as runtime:
        poll(runtime)
        write(tree / "a.md", "ALPHA")  # same size, mtime put back
        rewritten = events(poll(runtime))
        os.utime(tree / "a.md", (OLD + 60, OLD + 60))
        touched = events(poll(runtime))
    assert [(e["payload"]["watch_id"], e["payload"]["modified"]) for e in rewritten] == [("content", ["a.md"])]
    assert [(e["payload"]["watch_id"], e["payload"]["modified"]) for e in touched] == [("stat", ["a.md"])]
    files = PluginState.current("folder_watch")["watches"]
    assert files["content"]["files"]["a.md"] == hashlib.sha256(b"ALPHA").hexdigest()
    stat = (tree / "a.md").stat()
    assert files["stat"]["files"]["a.md"] == f"{stat.st_mtime_ns}:{stat.st_size}"


def test_per_file_mode_emits_one_event_per_path_with_the_original_payloads_and_keys(config_dir, tree):
    with watching(config_dir, watch(tree, emit_mode="per_file", strategy="sha256")) as runtime:
        poll(runtime)
        write(tree / "new.md", "new")
        (tree / "a.md").unlink()
        found = events(poll(runtime))
    created, deleted = found
    digest = hashlib.sha256(b"new").hexdigest()
    stat = (tree / "new.md").stat()
    assert created == {
        "type": "docs.changed",
        "payload": {
            "watch_id": "docs",
            "root": str(tree),
            "path": "new.md",
            "change_type": "created",
            "fingerprint": digest,
            "size": 3,
            "mtime_ns": stat.st_mtime_ns,
        },
        "dedupe_key": f"folder_watch:docs:new.md:{digest}",
    }
    alpha = hashlib.sha256(b"alpha").hexdigest()
    assert deleted["payload"] == {
        "watch_id": "docs",
        "root": str(tree),
        "path": "a.md",
        "change_type": "deleted",
        "previous_fingerprint": alpha,
    }
    assert deleted["dedupe_key"] == f"folder_watch:docs:a.md:deleted:{alpha}"


def test_emit_deleted_false_reports_no_deletion_and_a_file_that_returns_is_created(config_dir, tree):
    with watching(config_dir, watch(tree, emit_deleted=False)) as runtime:
        poll(runtime)
        (tree / "a.md").unlink()
        assert events(poll(runtime)) == []
        assert "a.md" not in PluginState.current("folder_watch")["watches"]["docs"]["files"]
        write(tree / "a.md", "alpha")
        [event] = events(poll(runtime))
    assert event["payload"]["created"] == ["a.md"]


def test_an_event_routes_with_its_dedupe_key_and_the_same_change_is_not_handled_twice(config_dir, tree):
    """The aggregate key is the snapshot's hash: a tree back in a state already reported within
    the dedupe window is not handled again."""
    config_dir.routes = [{"from": "folder_watch", "event_type": "docs.changed", "to": "echo"}]
    with watching(config_dir, watch(tree, strategy="sha256")) as runtime:
        poll(runtime)
        write(tree / "c.md", "charlie")
        [added] = events(poll(runtime))
        (tree / "c.md").unlink()
        poll(runtime)
        write(tree / "c.md", "charlie")
        [again] = events(poll(runtime))
    assert again["dedupe_key"] == added["dedupe_key"]
    handled = Job.objects.filter(plugin="echo", command="handle").order_by("created_at")
    keys = list(handled.values_list("dedupe_key", flat=True))
    # created, then deleted; the second `created` was the first one's duplicate
    assert len(keys) == 2 and keys[0] == added["dedupe_key"] and keys[1] != added["dedupe_key"]


# -- what is looked at -------------------------------------------------------------------------


def test_globs_recursion_and_hidden_files(config_dir, tmp_path):
    root = tmp_path / "site"
    for rel in ("a.md", "notes.txt", "sub/b.md", "sub/deep/c.md", "drafts/d.md", ".hidden/e.md", ".f.md"):
        write(root / rel, rel)
    os.mkfifo(root / "pipe.md")  # never read: it would block the poll
    globs = {"include_globs": ["**/*.md"], "exclude_globs": ["drafts/*"], "emit_initial": True}
    with watching(
        config_dir,
        watch(root, id="deep", **globs),
        watch(root, id="flat", recursive=False, **globs),
        watch(root, id="all", ignore_hidden=False, include_globs="*.md"),
        watch(root, id="everything", emit_initial=True),
    ) as runtime:
        found = {e["payload"]["watch_id"]: e["payload"]["created"] for e in events(poll(runtime))}
    assert found["deep"] == ["a.md", "sub/b.md", "sub/deep/c.md"]
    assert found["flat"] == ["a.md"]
    assert "all" not in found  # no emit_initial: a baseline
    assert sorted(PluginState.current("folder_watch")["watches"]["all"]["files"]) == [
        ".f.md",
        ".hidden/e.md",
        "a.md",
        "drafts/d.md",
        "sub/b.md",
        "sub/deep/c.md",
    ]
    assert found["everything"] == ["a.md", "drafts/d.md", "notes.txt", "sub/b.md", "sub/deep/c.md"]


def test_min_stable_age_holds_back_a_file_still_being_written(config_dir, tree):
    with watching(config_dir, watch(tree, min_stable_age="30s")) as runtime:
        poll(runtime)
        write(tree / "c.md", "half written", mtime=None)
        write(tree / "a.md", "alpha, being rewritten", mtime=None)
        held = poll(runtime)
        assert events(held) == [] and "skipped_unstable=2" in messages(held)
        # The file being rewritten keeps its last settled fingerprint: not deleted, not new.
        assert set(PluginState.current("folder_watch")["watches"]["docs"]["files"]) == {"a.md", "sub/b.md"}
        for name in ("c.md", "a.md"):
            os.utime(tree / name, (OLD + 10, OLD + 10))
        [event] = events(poll(runtime))
    assert (event["payload"]["created"], event["payload"]["modified"], event["payload"]["deleted"]) == (
        ["c.md"],
        ["a.md"],
        [],
    )


def test_symlinks_inside_the_root_are_followed_outside_only_when_configured(config_dir, tree, tmp_path):
    outside = write(tmp_path / "elsewhere" / "secret.md", "outside")
    (tree / "inner.md").symlink_to(tree / "a.md")
    (tree / "outer.md").symlink_to(outside)
    (tree / "loop").symlink_to(tree, target_is_directory=True)
    (tree / "dangling.md").symlink_to(tmp_path / "gone.md")
    with watching(
        config_dir,
        watch(tree, id="kept", emit_initial=True),
        watch(tree, id="followed", emit_initial=True, follow_symlinks=True),
    ) as runtime:
        response = poll(runtime)
    found = {e["payload"]["watch_id"]: e["payload"]["created"] for e in events(response)}
    assert found["kept"] == ["a.md", "inner.md", "sub/b.md"]
    assert found["followed"] == ["a.md", "inner.md", "outer.md", "sub/b.md"]  # never into `loop`
    assert "kept: 1 symlink(s) to files outside" in messages(response)
    assert "broken symlink" in messages(response)


def test_an_unreadable_file_is_reported_and_keeps_its_last_fingerprint(config_dir, tree):
    """Root reads any file whatever its mode (CI runs as root), so the unreadable file is one no
    process can read: /proc/self/mem fails every read at offset 0 with EIO."""
    with watching(config_dir, watch(tree, strategy="sha256", follow_symlinks=True)) as runtime:
        poll(runtime)
        (tree / "a.md").unlink()
        (tree / "a.md").symlink_to("/proc/self/mem")
        response = poll(runtime)
    assert events(response) == []  # not reported deleted: it is still there
    assert "docs: fingerprint failed for" in messages(response) and "a.md" in messages(response)
    assert PluginState.current("folder_watch")["watches"]["docs"]["files"]["a.md"] == (
        hashlib.sha256(b"alpha").hexdigest()
    )


def test_a_name_that_is_not_utf8_is_skipped_with_a_warning(config_dir, tree):
    write(Path(os.fsdecode(bytes(tree) + b"/caf\xe9.md")), "latin-1 name")
    with watching(config_dir, watch(tree, emit_initial=True)) as runtime:
        response = poll(runtime)
    [event] = events(response)
    assert event["payload"]["created"] == ["a.md", "sub/b.md"]
    assert "caf\\xe9.md: its name is not valid UTF-8" in messages(response)


# -- bounded work --------------------------------------------------------------------------------


def test_max_files_max_entries_and_max_events_bound_a_poll(config_dir, tmp_path):
    root = tmp_path / "big"
    for index in range(12):
        write(root / f"f{index:02}.txt", str(index))
    with watching(
        config_dir,
        watch(root, id="files", max_files=5, emit_initial=True),
        watch(root, id="entries", max_entries=3, emit_initial=True),
        watch(root, id="events", max_events=4, emit_initial=True),
        watch(root, id="per_file", max_events=4, emit_initial=True, emit_mode="per_file"),
    ) as runtime:
        response = poll(runtime)
    by_watch: dict[str, list[dict[str, Any]]] = {}
    for event in events(response):
        by_watch.setdefault(event["payload"]["watch_id"], []).append(event["payload"])
    [files] = by_watch["files"]
    assert files["created"] == [f"f{i:02}.txt" for i in range(5)] and files["state_truncated"] is True
    [entries] = by_watch["entries"]
    assert entries["created"] == ["f00.txt", "f01.txt", "f02.txt"] and entries["state_truncated"] is True
    [capped] = by_watch["events"]
    assert len(capped["created"]) == 4 and capped["changed_count"] == 12 and capped["payload_capped"] is True
    assert len(by_watch["per_file"]) == 4
    assert "files: state truncated at max_files=5" in messages(response)
    assert "entries: scan stopped after max_entries=3" in messages(response)


def test_a_snapshot_over_the_state_limit_fails_naming_the_watch(config_dir, tmp_path):
    """The gateway refuses a snapshot over 1 MiB; the plugin says which watch made it so."""
    root = tmp_path / "wide"
    root.mkdir()
    for index in range(4600):
        (root / f"{index:05}-{'x' * 200}.txt").touch()
    with watching(config_dir, watch(root)) as runtime:
        job = run_job(runtime, "folder_watch", max_attempts=1)
    assert job.status == JobStatus.FAILED
    assert "over the gateway's 1048576-byte state limit (docs: 4600 files)" in (job.last_error or "")
    assert "lower max_files or narrow include_globs" in (job.last_error or "")


# -- facts ---------------------------------------------------------------------------------------


def test_every_poll_records_a_folder_watch_snapshot_fact_and_the_state_mirrors_the_latest(config_dir, tree):
    with watching(config_dir, watch(tree, strategy="sha256"), name="docs_watch") as runtime:
        poll(runtime, "docs_watch")
        write(tree / "c.md", "charlie")
        poll(runtime, "docs_watch")
    facts = list(PluginFact.objects.filter(plugin_name="docs_watch").order_by("seq"))
    assert [f.fact_type for f in facts] == ["folder_watch.snapshot"] * 2
    assert facts[0].command == "poll" and facts[1].seq > facts[0].seq  # type: ignore[operator]
    assert PluginState.current("docs_watch") == facts[1].fact_json
    first, latest = (f.fact_json["watches"]["docs"] for f in facts)
    assert set(first["files"]) == {"a.md", "sub/b.md"} and latest["file_count"] == 3
    assert set(latest) == {
        "root",
        "files",
        "snapshot_hash",
        "file_count",
        "scanned_files",
        "skipped_unstable",
        "truncated",
        "strategy",
        "updated_at",
        "error",
    }
    assert latest["files"]["c.md"] == hashlib.sha256(b"charlie").hexdigest()
    assert set(facts[1].fact_json) == {"watches", "last_poll_at"}
    assert not PluginFact.objects.filter(plugin_name="folder_watch").exists()  # the alias has its own


def test_a_changed_root_or_strategy_starts_a_new_baseline(config_dir, tree, tmp_path):
    other = tmp_path / "other"
    write(other / "z.md", "zulu")
    with watching(config_dir, watch(tree)) as runtime:
        poll(runtime)
    with watching(config_dir, watch(other)) as runtime:
        assert events(poll(runtime)) == []
    with watching(config_dir, watch(other, strategy="sha256")) as runtime:
        assert events(poll(runtime)) == []
        assert PluginState.current("folder_watch")["watches"]["docs"]["strategy"] == "sha256"


# -- a missing root, health and refusals ------------------------------------------------------


def test_a_missing_root_is_logged_and_its_files_are_created_when_it_appears(config_dir, tmp_path):
    """As the original: the poll succeeds, says so in its log and records `root_not_found`; the
    directory's later files are reported as created (the watch was known, with no files)."""
    root = tmp_path / "later"
    with watching(config_dir, watch(root)) as runtime:
        response = poll(runtime)
        assert events(response) == []
        assert f"error: docs: root directory not found: {root}" in messages(response)
        entry = PluginState.current("folder_watch")["watches"]["docs"]
        assert (entry["error"], entry["files"]) == ("root_not_found", {})
        health = run_job(runtime, "folder_watch", command="health", max_attempts=1)
        assert health.status == JobStatus.FAILED
        assert health.last_error == f"folder_watch health failed: docs: root directory not found: {root}"
        write(root / "first.md", "one")
        [event] = events(poll(runtime))
        assert event["payload"]["created"] == ["first.md"]
        healthy = run_job(runtime, "folder_watch", command="health")
    assert healthy.status == JobStatus.SUCCEEDED
    assert last_response(healthy)["result"] == "folder_watch health OK (watches=1)"
    assert "state_updates" not in last_response(healthy)


def test_duplicate_watch_ids_are_refused_by_poll_and_health(config_dir, tree):
    with watching(config_dir, watch(tree), watch(tree)) as runtime:
        job = run_job(runtime, "folder_watch", max_attempts=3)
    assert job.status == JobStatus.FAILED and job.attempt == 1  # retry: false
    assert job.last_error == "invalid folder_watch config: duplicate watch id: docs"


@pytest.mark.process
def test_bad_config_is_refused_at_load_naming_file_line_and_key(config_dir, tree):
    config_dir.extra = {"api": {"enabled": False}}
    bad = {"id": "docs", "root": str(tree), "strategy": "md5", "min_stable_age": "soon", "stratgy": "x"}
    config_dir.plugins["folder_watch"] = {"config": {"watches": [bad]}}
    config_dir.write()
    lines = (config_dir.path / "config.yaml").read_text().splitlines()

    def line_of(text: str) -> int:
        return next(n for n, line in enumerate(lines, 1) if text in line)

    code, strict = ductile_json(config_dir, "config", "check", "--strict")
    assert code == 78
    errors = {e["key"]: e for e in strict["errors"]}
    assert set(errors) == {
        "plugins.folder_watch.config.watches[0].event_type",
        "plugins.folder_watch.config.watches[0].min_stable_age",
        "plugins.folder_watch.config.watches[0].strategy",
    }
    assert {e["file"] for e in errors.values()} == {str(config_dir.path / "config.yaml")}
    strategy = errors["plugins.folder_watch.config.watches[0].strategy"]
    assert strategy["line"] == line_of("strategy: md5")
    assert "expected sha256 or mtime_size, got 'md5'" in strategy["message"]
    assert errors["plugins.folder_watch.config.watches[0].event_type"]["message"].startswith(
        "plugin 'folder_watch' cannot run: missing required key 'event_type'"
    )
    assert "30s, 5m or 1h, got 'soon'" in errors["plugins.folder_watch.config.watches[0].min_stable_age"]["message"]
    # Outside strict mode the plugin is skipped with the same reasons; the others run.
    code, listed = ductile_json(config_dir, "plugin", "list")
    assert code == 0 and "folder_watch" not in {p["name"] for p in listed["plugins"]}
    [skipped] = [s for s in listed["skipped"] if s["name"] == "folder_watch"]
    assert (
        f"config.yaml:{line_of('strategy: md5')} key plugins.folder_watch.config.watches[0].strategy"
        in (skipped["reason"])
    )


@pytest.mark.process
def test_an_unknown_watch_key_is_a_warning_with_its_line(config_dir, tree):
    config_dir.plugins["folder_watch"] = {"config": {"watches": [watch(tree, stratgy="sha256")]}}
    config_dir.write()
    code, body = ductile_json(config_dir, "config", "check")
    assert code == 0 and body["valid"] is True
    assert any(
        "key plugins.folder_watch.config.watches[0].stratgy: config key 'stratgy' is not declared" in w
        for w in body["warnings"]
    ), body["warnings"]


@pytest.mark.process
def test_plugin_list_shows_both_watchers(config_dir, tree, tmp_path):
    config_dir.plugins["folder_watch"] = {"config": {"watches": [watch(tree)]}}
    config_dir.plugins["file_watch"] = {
        "config": {"watches": [{"id": "f", "path": str(tree / "a.md"), "event_type": "f.changed"}]}
    }
    config_dir.write()
    code, body = ductile_json(config_dir, "plugin", "list")
    listed = {p["name"]: p for p in body["plugins"]}
    assert code == 0 and {"folder_watch", "file_watch"} <= set(listed)
    assert listed["folder_watch"]["commands"] == ["poll", "health"] and "health" in listed["folder_watch"]


# -- the cookbook: Automated Astro Staging Rebuild ------------------------------------------------

# Spec 000, Cookbook, "Pattern: Automated Astro Staging Rebuild", step 1, as printed.
ASTRO_PLUGINS = """\
# ~/.config/ductile/plugins.yaml
plugins:
  folder_watch:
    enabled: true
    schedules:
      - id: default
        every: 1m
    config:
      watches:
        - id: astro_summaries
          root: ${HOME}/site/src/content/summaries
          event_type: astro.summaries.changed
          recursive: true
          include_globs: ["**/*.md"]
          emit_mode: aggregate
"""

# Step 2, as printed; step 3's rebuild connector is a sys_exec clone, here one that records the
# payload it was handed instead of rebuilding a site.
ASTRO_PIPELINES = """\
# ~/.config/ductile/pipelines.yaml
pipelines:
  - name: astro-rebuild-on-change
    on: astro.summaries.changed
    steps:
      - id: rebuild_staging
        uses: astro_rebuild_staging
"""


@pytest.mark.process
def test_the_cookbook_astro_recipe_passes_strict_check_and_emits_its_event(config_dir, tmp_path):
    home = tmp_path / "home"
    summaries = home / "site" / "src" / "content" / "summaries"
    write(summaries / "2024" / "first.md", "first summary")
    write(summaries / "notes.txt", "not a summary")
    config_dir.file("plugins.yaml", ASTRO_PLUGINS)
    config_dir.file("pipelines.yaml", ASTRO_PIPELINES)
    config_dir.plugins = {
        "astro_rebuild_staging": {
            "uses": "sys_exec",
            "timeout": "15m",
            "config": {"command": 'printf %s "$DUCTILE_PAYLOAD"', "working_dir": str(tmp_path)},
        }
    }
    config_dir.extra = {"include": ["plugins.yaml", "pipelines.yaml"], "api": {"enabled": False}}
    config_dir.write()
    code, check = ductile_json(config_dir, "config", "check", "--strict", HOME=str(home))
    assert (code, check["errors"], check["strict"]) == (0, [], True), check
    with installed_runtime(config_dir, {**os.environ, "HOME": str(home)}) as runtime:
        assert events(poll(runtime)) == []
        write(summaries / "2024" / "second.md", "second summary")
        write(summaries / "draft.txt", "ignored")
        [event] = events(poll(runtime))
    assert event["type"] == "astro.summaries.changed"
    assert event["payload"]["watch_id"] == "astro_summaries" and event["payload"]["root"] == str(summaries)
    assert (event["payload"]["created"], event["payload"]["modified"], event["payload"]["deleted"]) == (
        ["2024/second.md"],
        [],
        [],
    )
    rebuild = jobs_by_step("astro-rebuild-on-change")["rebuild_staging"]
    assert rebuild.status == JobStatus.SUCCEEDED and rebuild.plugin == "astro_rebuild_staging"
    handed = last_response(rebuild)["events"][0]["payload"]["stdout"]
    assert '"created": ["2024/second.md"]' in handed
