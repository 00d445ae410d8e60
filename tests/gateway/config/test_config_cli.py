"""The `config` noun as an operator or an agent drives it, in real subprocesses (Operator
Handbook "Config", "The config lock ritual", "Entity addressing"): check with every problem and
the right exit code, lock, show/get with entity addressing and secrets redacted, set (validated,
atomic, re-sealed; a refused change leaves the file byte-identical), init (a starter config that
passes check and runs a job) and token create (works at once, secret printed once)."""

from __future__ import annotations

import json

import pytest
import yaml

from gateway.config.integrity import CHECKSUMS, read_seal
from gateway.runtime import build_runtime
from tests.support.checkout import REPO
from tests.support.config_dirs import ConfigDir
from tests.support.processes import ductile, ductile_json

pytestmark = pytest.mark.process


def test_check_lists_every_problem_with_file_line_and_key_and_exits_78(config_dir: ConfigDir) -> None:
    config_dir.service["max_workers"] = 0
    config_dir.plugins["echo"]["timeout"] = "soon"
    config_dir.write()
    code, body = ductile_json(config_dir, "config", "check")
    assert code == 78 and body["valid"] is False
    keys = {e["key"] for e in body["errors"]}
    assert {"service.max_workers", "plugins.echo.timeout"} <= keys
    assert all(e["file"] == str(config_dir.path / "config.yaml") and e["line"] for e in body["errors"])
    text = ductile(config_dir, "config", "check")
    assert text.returncode == 78 and "Configuration invalid (2 error(s))" in text.stdout


def test_check_passes_a_sealed_config_and_strict_turns_an_unlocked_edit_into_a_failure(config_dir: ConfigDir) -> None:
    config_dir.extra = {"api": {"enabled": False}}  # strict mode would also want an API token
    config_dir.write()
    code, body = ductile_json(config_dir, "config", "check")
    assert (code, body["valid"], body["errors"]) == (0, True, [])
    assert {f["status"] for f in body["files"]} == {"ok"}
    (config_dir.path / "config.yaml").write_text((config_dir.path / "config.yaml").read_text() + "# hand edit\n")
    code, body = ductile_json(config_dir, "config", "check")
    assert code == 0 and any("does not match .checksums" in w for w in body["warnings"])
    assert {f["path"]: f["status"] for f in body["files"]}[str(config_dir.path / "config.yaml")] == "changed"
    code, body = ductile_json(config_dir, "config", "check", "--strict")
    assert code == 78 and body["strict"] is True
    assert any(e["file"] == str(config_dir.path / "config.yaml") for e in body["errors"])
    # The ritual: lock authorizes the edit.
    dry = ductile_json(config_dir, "config", "lock", "--dry-run")[1]
    assert dry["written"] is False and ductile_json(config_dir, "config", "check", "--strict")[0] == 78
    code, locked = ductile_json(config_dir, "config", "lock")
    assert code == 0 and [(f["path"], f["change"]) for f in locked["files"]] == [
        (str(config_dir.path / "config.yaml"), "changed")
    ]
    assert ductile_json(config_dir, "config", "check", "--strict")[0] == 0


def test_a_tampered_token_file_stops_every_command_with_exit_78_naming_it(config_dir: ConfigDir) -> None:
    config_dir.file("tokens.yaml", yaml.safe_dump({"tokens": [{"name": "t", "key": "k", "scopes": ["*"]}]}))
    config_dir.extra = {"include": ["tokens.yaml"]}
    config_dir.write()
    assert ductile(config_dir, "system", "status").returncode == 0
    tokens = config_dir.path / "tokens.yaml"
    tokens.write_text(tokens.read_text().replace("k", "stolen"))
    for args in (("system", "status"), ("config", "check")):
        proc = ductile(config_dir, *args)
        assert proc.returncode == 78, proc
        assert f"{tokens}: does not match .checksums" in proc.stderr + proc.stdout


def test_show_and_get_address_entities_and_never_print_secrets(config_dir: ConfigDir) -> None:
    config_dir.plugins["echo"]["config"] = {"message": "hi", "api_key": "SECRET-VALUE"}
    config_dir.extra = {
        "pipelines": [{"name": "p1", "on": "x.y", "steps": [{"uses": "echo"}]}],
        "api": {"auth": {"tokens": [{"name": "admin", "token": "TOKEN-VALUE", "scopes": ["*"]}]}},
    }
    config_dir.write()
    code, whole = ductile_json(config_dir, "config", "show")
    assert code == 0 and "SECRET-VALUE" not in json.dumps(whole) and "TOKEN-VALUE" not in json.dumps(whole)
    assert whole["service"]["job_log_retention"] == "30d"  # defaults filled in
    plugin = ductile_json(config_dir, "config", "show", "plugin:echo")[1]
    assert plugin["status"] == "loaded" and plugin["config"]["api_key"] == "[REDACTED]"
    assert plugin["retry"]["max_attempts"] == 4 and "poll" in plugin["manifest"]["commands"]  # spec default
    assert ductile_json(config_dir, "config", "show", "plugin:*")[1]["names"] == list(config_dir.plugins)
    assert ductile_json(config_dir, "config", "show", "pipeline:p1")[1]["on"] == "x.y"
    get = ductile_json(config_dir, "config", "get", "plugin:echo.config.message")[1]
    assert get["value"] == "hi" and get["defined_in"].startswith(str(config_dir.path / "config.yaml") + ":")
    assert ductile(config_dir, "config", "get", "plugins.echo.config.message").stdout.strip() == "hi"
    assert ductile(config_dir, "config", "get", "plugins.echo.config.api_key").stdout.strip() == "[REDACTED]"
    missing = ductile(config_dir, "config", "get", "plugins.echo.nope")
    assert missing.returncode == 1 and "plugins.echo.nope" in missing.stderr
    assert ductile(config_dir, "config", "get", "plugin:ghost.enabled").returncode == 2


def test_set_dry_run_writes_nothing_and_apply_edits_the_defining_file_and_reseals_it(config_dir: ConfigDir) -> None:
    config_dir.file(
        "more.yaml", "# operator's notes stay\nplugins:\n  py-greet:\n    config:\n      name: A  # inline too\n"
    )
    del config_dir.plugins["py-greet"]  # more.yaml is where it is defined
    config_dir.extra = {"include": ["more.yaml"], "api": {"enabled": False}}
    config_dir.write()
    more = config_dir.path / "more.yaml"
    before = more.read_bytes()
    code, dry = ductile_json(config_dir, "config", "set", "plugin:py-greet.enabled=false", "--dry-run")
    assert code == 0 and dry["file"] == str(more) and "+    enabled: false" in dry["diff"]
    assert more.read_bytes() == before
    code, done = ductile_json(config_dir, "config", "set", "plugin:py-greet.enabled=false", "--apply")
    assert code == 0 and done["resealed"] == [str(more)]
    text = more.read_text()
    assert "# operator's notes stay" in text and "# inline too" in text and "enabled: false" in text
    assert ductile_json(config_dir, "config", "check", "--strict")[0] == 0  # sealed again
    assert build_runtime(config_dir.path).config.plugins["py-greet"].enabled is False


def test_a_refused_set_leaves_the_file_and_the_seal_byte_identical(config_dir: ConfigDir) -> None:
    config_dir.write()
    root, seal = config_dir.path / "config.yaml", config_dir.path / CHECKSUMS
    before, seal_before = root.read_bytes(), seal.read_bytes()
    proc = ductile(config_dir, "config", "set", "service.max_workers=0", "--apply")
    assert proc.returncode == 78
    assert "nothing was written" in proc.stderr and "key service.max_workers" in proc.stderr
    assert ductile(config_dir, "config", "set", "service.dedupe_ttl=48h", "--apply").returncode == 78  # > retention
    assert ductile(config_dir, "config", "set", "plugins.echo.config.message[0]=x", "--apply").returncode == 2
    assert ductile(config_dir, "config", "set", "no-equals-sign", "--apply").returncode == 2
    assert ductile(config_dir, "config", "set", "service.name=x").returncode == 2  # --dry-run or --apply
    assert (root.read_bytes(), seal.read_bytes()) == (before, seal_before)


def test_init_writes_a_sealed_starter_that_passes_check_and_runs_a_job(config_dir: ConfigDir, tmp_path) -> None:
    target = ConfigDir(tmp_path / "fresh")
    code, body = ductile_json(target, "config", "init", str(target.path))
    assert code == 0 and len(body["admin_token"]) == 64
    assert {p.split("/")[-1] for p in body["files"]} >= {"config.yaml", "tokens.yaml", "admin.json", ".env"}
    assert (target.path / ".env").stat().st_mode & 0o777 == 0o600
    seal = read_seal(target.path)
    assert seal is not None and str(target.path / "tokens.yaml") in seal.hashes
    code, check = ductile_json(target, "config", "check", "--strict")
    assert (code, check["valid"], check["warnings"]) == (0, True, [])
    run = ductile(target, "plugin", "run", "echo", "--payload", '{"message": "first light"}', timeout=120)
    assert run.returncode == 0, run.stderr
    assert "first light" in run.stdout
    again = ductile(target, "config", "init", str(target.path))
    assert again.returncode == 1 and "never overwrites" in again.stderr


def test_a_fresh_config_lists_every_bundled_plugin_with_its_health(tmp_path) -> None:
    """Issue 34: `plugin list` on a fresh `config init` shows every bundled plugin, configured or
    not, each with its health; `--check` asks the enabled ones (their `health` command) first."""
    target = ConfigDir(tmp_path / "fresh")
    assert ductile_json(target, "config", "init", str(target.path))[0] == 0
    bundled = {d.name for d in (REPO / "plugins").iterdir() if (d / "manifest.yaml").is_file() and d.name[0] != "_"}
    code, listed = ductile_json(target, "plugin", "list")
    rows = {row["name"]: row for row in listed["plugins"]}
    assert code == 0 and set(rows) == bundled
    assert rows["echo"]["state"] == "enabled" and rows["echo"]["health"] == "unknown"
    assert {row["health"] for name, row in rows.items() if name != "echo"} <= {"ready", "cannot run"}
    assert all(row["state"] == "available" for name, row in rows.items() if name != "echo")
    code, checked = ductile_json(target, "plugin", "list", "--check")
    assert code == 0 and {row["name"]: row["health"] for row in checked["plugins"]}["echo"] == "healthy"
    # A plugin whose health check fails says so (sys_exec's working_dir is not there).
    (target.path / "plugins.yaml").write_text(
        "plugins:\n  echo: {}\n  sys_exec:\n    config: {command: 'true', working_dir: /no/such/dir}\n"
    )
    assert ductile(target, "config", "lock").returncode == 0
    _, checked = ductile_json(target, "plugin", "list", "--check")
    assert {row["name"]: row["health"] for row in checked["plugins"]}["sys_exec"] == "unhealthy"


def test_init_creates_its_directories_0700_and_its_files_0600_and_an_edit_keeps_a_relaxed_mode(tmp_path) -> None:
    """Spec 000 §13.2, "Default Permissions": config directories 0700, config and lock files
    0600; "operators may relax permissions explicitly", and an edit keeps what they chose."""
    target = ConfigDir(tmp_path / "base")
    fresh = tmp_path / "home" / "ductile"
    code, body = ductile_json(target, "config", "init", str(fresh))
    assert code == 0, body
    for directory in (tmp_path / "home", fresh, fresh / "scopes"):
        assert directory.stat().st_mode & 0o777 == 0o700, directory
    files = [p for p in fresh.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"config.yaml", "plugins.yaml", "tokens.yaml", ".env", ".checksums"}
    assert {p.name: p.stat().st_mode & 0o777 for p in files} == dict.fromkeys((p.name for p in files), 0o600)
    (fresh / "config.yaml").chmod(0o644)
    edit = ductile(ConfigDir(fresh), "config", "set", "service.name=home", "--apply")
    assert edit.returncode == 0, edit.stderr
    assert "name: home" in (fresh / "config.yaml").read_text()
    assert (fresh / "config.yaml").stat().st_mode & 0o777 == 0o644


def test_token_create_writes_seals_and_works_at_once_printing_the_secret_once(config_dir: ConfigDir) -> None:
    config_dir.write()
    code, body = ductile_json(
        config_dir, "config", "token", "create", "--name", "ci-bot", "--scopes", "jobs:ro,echo:rw"
    )
    assert code == 0 and body["env_var"] == "DUCTILE_TOKEN_CI_BOT" and len(body["token"]) == 64
    runtime = build_runtime(config_dir.path)
    token = runtime.tokens.authenticate(body["token"])
    assert token is not None and token.allows("echo:rw") and token.allows("jobs:ro") and not token.allows("jobs:rw")
    seal = read_seal(config_dir.path)
    assert seal is not None
    assert {str(config_dir.path / n) for n in ("tokens.yaml", "scopes/ci-bot.json", ".env")} <= set(seal.hashes)
    assert ductile_json(config_dir, "config", "check", "--strict")[0] == 0
    shown = ductile(config_dir, "config", "show").stdout + ductile(config_dir, "config", "get", "tokens").stdout
    assert body["token"] not in shown
    duplicate = ductile(config_dir, "config", "token", "create", "--name", "ci-bot", "--scopes", "*")
    assert duplicate.returncode == 1 and "exists already" in duplicate.stderr


def test_token_create_issues_the_originals_finer_scopes_which_config_check_accepts(config_dir: ConfigDir) -> None:
    config_dir.write()
    finer = "plugin:catalog:ro,jobs:status:ro,jobs:result:ro,jobs:logs:ro,jobs:tree:ro"
    code, body = ductile_json(config_dir, "config", "token", "create", "--name", "narrow", "--scopes", finer)
    assert code == 0, body
    token = build_runtime(config_dir.path).tokens.authenticate(body["token"])
    assert token is not None and token.scopes == frozenset(finer.split(","))
    assert not token.allows("jobs:ro") and not token.allows("plugin:ro")  # narrower grants no broader
    check = ductile(config_dir, "config", "check", "--strict")
    assert check.returncode == 0 and "scope" not in check.stderr, check.stderr
    typo = ductile(config_dir, "config", "token", "create", "--name", "typo", "--scopes", "jobs:stauts:ro")
    assert typo.returncode == 1 and "'jobs:stauts:ro' is not a scope" in typo.stderr
    assert "jobs:status:ro" in typo.stderr  # the message lists the finer ones too


@pytest.mark.parametrize("scopes", ["jobs:admin", "ghost:rw", ""])
def test_token_create_refuses_scopes_it_cannot_grant_and_writes_nothing(config_dir: ConfigDir, scopes: str) -> None:
    config_dir.write()
    listing = sorted(p.name for p in config_dir.path.rglob("*"))
    proc = ductile(config_dir, "config", "token", "create", "--name", "x", "--scopes", scopes)
    assert proc.returncode == 1 and proc.stderr
    assert sorted(p.name for p in config_dir.path.rglob("*")) == listing
