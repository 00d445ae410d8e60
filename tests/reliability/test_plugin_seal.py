"""Sealed plugin code (issue 12, defects 3 and 4): `config lock` fingerprints every configured
plugin's manifest and entrypoint (spec 000 testing guide, "Config integrity / plugin fingerprint
tests"); a changed plugin is refused in strict mode ("plugin fingerprint check failed (strict
mode)", Troubleshooting) and warned about otherwise, at load and again before every spawn; an
entrypoint swapped for a symlink out of its plugin root is never run.

The plugin is written to a temporary plugin root for each test and tampered with there.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path

import blake3
import pytest
import yaml

from gateway.config.errors import ConfigError
from gateway.config.integrity import PluginFingerprint, lock, read_seal
from gateway.config.loader import config_files
from gateway.runtime import build_runtime
from tests.support.config_dirs import PLUGIN_ROOTS, ConfigDir
from tests.support.processes import ductile, ductile_json, ledger, start_workers, stop_gracefully
from tests.support.waiting import wait_for

MANIFEST = """\
manifest_spec: ductile.plugin
manifest_version: 1
name: mine
version: 1.0.0
protocol: 2
entrypoint: run.py
commands:
  - name: poll
    type: read
  - name: init
    type: write
"""

ENTRYPOINT = """\
#!/usr/bin/env python3
import json, sys
request = json.load(sys.stdin)
marker = ((request.get("event") or {}).get("payload") or {}).get("marker")
if marker:
    with open(marker, "a") as fh:
        fh.write("WHO\\n")
print(json.dumps({"status": "ok", "result": "WHO"}))
"""


def write_plugin(root: Path, who: str = "original") -> Path:
    directory = root / "mine"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "manifest.yaml").write_text(MANIFEST)
    entry = directory / "run.py"
    entry.write_text(ENTRYPOINT.replace("WHO", who))
    entry.chmod(0o755)
    return directory


def tamper(path: Path) -> None:
    path.write_text(path.read_text().replace("original", "tampered") + "# edited without a lock\n")


@pytest.fixture
def cfg(process_db, tmp_path) -> ConfigDir:
    """A sealed config whose plugin `mine` lives in a plugin root of this test's own."""
    root = tmp_path / "roots"
    write_plugin(root)
    process_db.extra = {"plugin_roots": [str(root), *PLUGIN_ROOTS], "api": {"enabled": False}}
    process_db.plugins = {"mine": {"config": {}}, "echo": {"config": {"message": "hi"}}}
    process_db.write()
    return process_db


def plugin_dir(cfg: ConfigDir) -> Path:
    return Path(cfg.extra["plugin_roots"][0]) / "mine"


def strict(cfg: ConfigDir, on: bool = True) -> None:
    cfg.service["strict_mode"] = on
    cfg.write()


def refusal(cfg: ConfigDir) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        build_runtime(cfg.path, os.environ)
    return [str(p) for p in caught.value.problems]


# -- the seal ---------------------------------------------------------------------------------


def sealed_by(cfg: ConfigDir) -> tuple[Mapping[str, str], Mapping[str, PluginFingerprint]]:
    """What `config lock` sealed in the config directory: its files' hashes and its plugins'."""
    seal = read_seal(cfg.path)
    assert seal is not None and seal.plugins is not None, "the directory has no seal of plugins"
    return seal.hashes, seal.plugins


@pytest.mark.process
def test_config_lock_fingerprints_manifest_and_entrypoint_bytes_with_both_paths(cfg):
    entry = plugin_dir(cfg) / "run.py"
    real = entry.with_name("real-run.py")
    entry.rename(real)
    entry.symlink_to(real.name)  # a symlink inside the plugin root: allowed, and recorded both ways
    code, body = ductile_json(cfg, "config", "lock")
    assert code == 0, body
    assert {"name": "mine", "change": "unchanged"} in body["plugins"]  # the same bytes: the same code
    recorded = sealed_by(cfg)[1]["mine"]
    assert recorded.manifest_hash == blake3.blake3((plugin_dir(cfg) / "manifest.yaml").read_bytes()).hexdigest()
    assert recorded.entrypoint_hash == blake3.blake3(real.read_bytes()).hexdigest()
    assert (recorded.entrypoint_path, recorded.entrypoint_resolved_path) == (str(entry), str(real))
    seal = yaml.safe_load((cfg.path / ".checksums").read_text())  # the original's field names
    assert {"name", "enabled", "manifest_path", "manifest_hash", "entrypoint_path", "entrypoint_hash"} <= set(
        seal["plugin_fingerprints"][0]
    )


@pytest.mark.parametrize("name", ["manifest.yaml", "run.py"])
def test_a_plugin_changed_after_lock_refuses_the_config_in_strict_mode_and_warns_otherwise(cfg, name):
    tamper(plugin_dir(cfg) / name)
    runtime = build_runtime(cfg.path, os.environ)
    warnings = [str(w) for w in runtime.registry.warnings]
    assert any("plugin fingerprint check failed: plugin 'mine' changed" in w and name in w for w in warnings), warnings
    strict(cfg)
    tamper(plugin_dir(cfg) / name)  # write() re-locked the config: change the plugin again
    problems = refusal(cfg)
    assert any(
        "plugin fingerprint check failed (strict mode): plugin 'mine' changed" in p and "key plugins.mine" in p
        for p in problems
    ), problems
    assert any("`ductile plugin lock mine`" in p for p in problems)


def test_disabled_plugins_and_stale_fingerprints_only_warn(cfg):
    cfg.plugins["mine"]["enabled"] = False
    strict(cfg)
    tamper(plugin_dir(cfg) / "run.py")
    _, plugins = sealed_by(cfg)
    runtime = build_runtime(cfg.path, os.environ)  # strict, and still loads
    assert any("plugin 'mine' changed" in str(w) for w in runtime.registry.warnings)
    del cfg.plugins["mine"]
    cfg.sealed = False
    cfg.write()
    lock(cfg.path, config_files(cfg.path))  # the config re-sealed, the old fingerprints kept
    assert sealed_by(cfg)[1] == plugins
    runtime = build_runtime(cfg.path, os.environ)
    assert any(
        "plugin 'mine' has a fingerprint in .checksums but is not configured" in str(w)
        for w in runtime.registry.warnings
    )


def test_a_seal_without_plugin_fingerprints_fails_when_plugins_are_configured(cfg):
    strict(cfg)
    lock(cfg.path, config_files(cfg.path), plugins=[])  # as a seal written before plugins were sealed
    assert any("has no plugin_fingerprints" in p for p in refusal(cfg))


@pytest.mark.process
def test_plugin_lock_authorizes_one_plugin_and_blesses_nothing_else(cfg):
    strict(cfg)
    tamper(plugin_dir(cfg) / "run.py")
    code, body = ductile_json(cfg, "config", "check")
    assert code == 78 and any("plugin fingerprint check failed (strict mode)" in e["message"] for e in body["errors"])
    root = cfg.path / "config.yaml"
    (hashes, plugins), original = sealed_by(cfg), root.read_text()
    root.write_text(original + "# edited by hand, not reviewed\n")
    code, body = ductile_json(cfg, "plugin", "lock", "mine")
    assert code == 0 and body["plugins"] == [{"name": "mine", "change": "changed"}] and body["files"] == [], body
    hashes_after, plugins_after = sealed_by(cfg)
    assert hashes_after == hashes  # config.yaml's edit is not blessed by a plugin lock
    assert plugins_after["echo"] == plugins["echo"] and not plugins_after["mine"].same_code(plugins["mine"])
    root.write_text(original)
    code, body = ductile_json(cfg, "config", "check")
    assert code == 0 and body["valid"], body
    assert ductile(cfg, "plugin", "lock").returncode == 2  # a name, or --all
    code, body = ductile_json(cfg, "plugin", "lock", "--all", "--dry-run")
    assert code == 0 and not body["written"] and {p["name"] for p in body["plugins"]} == {"echo", "mine"}


@pytest.mark.django_db(transaction=True)  # the jobs run on the worker's thread, on its own connection
def test_an_edited_entrypoint_runs_init_again(cfg):
    from gateway.execution.lifecycle import schedule_inits

    assert len(schedule_inits(build_runtime(cfg.path, os.environ))) == 1
    assert schedule_inits(build_runtime(cfg.path, os.environ)) == []
    tamper(plugin_dir(cfg) / "run.py")  # the manifest is unchanged
    cfg.lock()
    assert len(schedule_inits(build_runtime(cfg.path, os.environ))) == 1


# -- before every spawn: real daemons, real plugins -------------------------------------------


TERMINAL = ("succeeded", "failed", "dead")


def running_daemon(cfg: ConfigDir):
    daemon = start_workers(cfg, "--threads", "1", "--interval", "0.1")
    # Ready once it has run the plugin's first `init` (the config as loaded, before any tampering).
    wait_for(
        lambda: any(j["command"] == "init" and j["status"] == "succeeded" for j in ledger(cfg)),
        timeout=60,
        what="the daemon to start",
    )
    return daemon


def run_job(cfg: ConfigDir, marker: Path) -> dict:
    (job_id,) = ledger(
        cfg,
        "enqueue",
        [
            {
                "plugin": "mine",
                "command": "poll",
                "submitted_by": "cli",
                "max_attempts": 1,
                "payload": {"marker": str(marker)},
            }
        ],
    )
    return wait_for(
        lambda: next(
            (j for j in ledger(cfg) if j["id"] == job_id and j["status"] in ("succeeded", "failed", "dead")), None
        ),
        timeout=60,
        what="the job to end",
    )


def run_after_tampering(cfg: ConfigDir, marker: Path) -> dict:
    """Edit the plugin's entrypoint under a daemon that loaded it sealed, then run a job."""
    daemon = running_daemon(cfg)
    try:
        tamper(plugin_dir(cfg) / "run.py")
        return run_job(cfg, marker)
    finally:
        stop_gracefully(daemon, timeout=20)


@pytest.mark.postgres
@pytest.mark.process
def test_strict_mode_refuses_to_spawn_a_plugin_edited_under_a_running_daemon(cfg, tmp_path):
    strict(cfg)
    marker = tmp_path / "ran"
    job = run_after_tampering(cfg, marker)
    assert job["status"] == "failed", job  # for good: retrying cannot help before someone looks
    assert job["last_error"].startswith("plugin fingerprint check failed (strict mode): plugin 'mine' changed")
    assert not marker.exists(), "the tampered entrypoint ran"


@pytest.mark.postgres
@pytest.mark.process
def test_without_strict_mode_an_edited_plugin_runs_with_a_warning_in_its_job_log(cfg, tmp_path):
    marker = tmp_path / "ran"
    job = run_after_tampering(cfg, marker)
    assert job["status"] == "succeeded" and marker.read_text() == "tampered\n"
    _, body = ductile_json(cfg, "job", "logs", "--job-id", job["id"])
    (log,) = body["logs"] if isinstance(body, dict) else body
    assert "[ductile] warning: plugin fingerprint check failed: plugin 'mine' changed" in log["stderr"], log


@pytest.mark.postgres
@pytest.mark.process
@pytest.mark.parametrize("mode", [False, True])
def test_an_entrypoint_swapped_for_a_symlink_out_of_the_plugin_root_is_never_run(cfg, tmp_path, mode):
    strict(cfg, mode)
    outside = tmp_path / "outside"
    evil = outside / "evil.py"
    outside.mkdir()
    evil.write_text(ENTRYPOINT.replace("WHO", "evil"))
    evil.chmod(0o755)
    marker = tmp_path / "ran"
    daemon = running_daemon(cfg)
    try:
        entry = plugin_dir(cfg) / "run.py"
        entry.unlink()
        entry.symlink_to(evil)
        job = run_job(cfg, marker)
    finally:
        stop_gracefully(daemon, timeout=20)
    assert not marker.exists(), f"the file outside the plugin root ran: {marker.read_text()}"
    assert job["status"] == "failed", job
    assert f"now resolves to {evil}, outside plugin root" in job["last_error"], job["last_error"]


def test_the_spawn_check_sees_an_edit_that_kept_size_and_mtime(cfg):
    """The hash cache is keyed on the stat, ctime included: restoring the mtime does not hide an
    edit. (Files changed in the last two seconds are never cached, hence the wait.)"""
    strict(cfg)
    # Not synchronisation: the clock has to pass the cache's two-second window, or nothing is cached.
    time.sleep(2.1)
    runtime = build_runtime(cfg.path, os.environ)
    instance = runtime.registry.instances["mine"]
    assert runtime.plugin_seal.check(instance).refusal is None
    entry = plugin_dir(cfg) / "run.py"
    before = entry.stat()
    entry.write_text(entry.read_text().replace("original", "tampered"))  # same length
    os.utime(entry, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert entry.stat().st_size == before.st_size and entry.stat().st_mtime_ns == before.st_mtime_ns
    refused = runtime.plugin_seal.check(instance).refusal
    assert refused and refused.startswith("plugin fingerprint check failed (strict mode)"), refused


def test_a_symlinked_plugin_root_swap_is_checked_against_the_root_resolved_at_load(cfg, tmp_path):
    runtime = build_runtime(cfg.path, os.environ)
    instance = runtime.registry.instances["mine"]
    other = tmp_path / "elsewhere"
    write_plugin(other, "elsewhere")
    directory = plugin_dir(cfg)
    directory.rename(directory.with_name("mine-moved"))
    directory.symlink_to(other / "mine")  # the plugin directory itself now points out of the root
    refused = runtime.plugin_seal.check(instance).refusal
    assert refused and "outside plugin root" in refused, refused
    assert json.dumps(refused)  # a plain message, storable as the job's error
