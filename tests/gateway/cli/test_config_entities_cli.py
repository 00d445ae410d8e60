"""The original's config editing verbs (`config plugin|route|webhook`), `config backup|restore`
and `config schema|validate`, in-process: what they print, and that what they write loads."""

from __future__ import annotations

import json
import tarfile

import pytest
import yaml

from gateway.runtime import build_runtime
from tests.gateway.cli.test_cli_surface import run
from tests.support.config_dirs import ConfigDir
from tests.support.runtime import installed_runtime


@pytest.fixture
def cfg(config_dir: ConfigDir):
    config_dir.file("tokens.yaml", yaml.safe_dump({"tokens": [{"name": "gh-secret", "key": "s3cret-value"}]}))
    config_dir.extra["include"] = ["tokens.yaml"]
    with installed_runtime(config_dir):
        yield config_dir


def test_config_plugin_list_show_and_set(cfg):
    code, out, _ = run("config", "plugin", "list", "--json")
    rows = {r["name"]: r for r in json.loads(out)["plugins"]}
    assert code == 0 and rows["echo"]["configured"] is True and rows["sys_exec"]["configured"] is False
    assert "poll:write" in rows["echo"]["commands"] or "poll:read" in rows["echo"]["commands"]
    code, out, _ = run("config", "plugin", "show", "echo", "--json")
    assert code == 0 and json.loads(out)["config"] == {"message": "hi"}
    code, out, _ = run("config", "plugin", "set", "echo", "config.message", "bonjour", "--dry-run")
    assert code == 0 and "+      message: bonjour" in out.replace("'", "")
    assert build_runtime(cfg.path).config.plugins["echo"].config["message"] == "hi"
    assert run("config", "plugin", "set", "echo", "config.message", "bonjour")[0] == 0
    assert build_runtime(cfg.path).config.plugins["echo"].config["message"] == "bonjour"
    code, _, err = run("config", "plugin", "set", "echo", "parallelism", "many")
    assert code == 78 and "nothing was written" in err and "plugins.echo.parallelism" in err


def test_config_route_add_list_and_remove(cfg):
    code, out, _ = run("config", "route", "add", "--from", "echo", "--event", "echo.done", "--to", "py-greet")
    assert code == 0 and out.splitlines()[-2].startswith("added route echo:echo.done -> py-greet in ")
    assert [(r.source, r.event_type, r.target) for r in build_runtime(cfg.path).config.routes] == [
        ("echo", "echo.done", "py-greet")
    ]
    listed = json.loads(run("config", "route", "list", "--json")[1])["routes"]
    assert [(r["from"], r["event_type"], r["to"]) for r in listed] == [("echo", "echo.done", "py-greet")]
    code, _, err = run("config", "route", "add", "--from", "echo", "--event", "echo.done", "--to", "py-greet")
    assert code == 2 and "exists already" in err
    assert run("config", "route", "remove", "--from", "echo", "--event", "echo.done", "--to", "py-greet")[0] == 0
    assert build_runtime(cfg.path).config.routes == ()
    code, _, err = run("config", "route", "remove", "--from", "echo", "--event", "echo.done", "--to", "py-greet")
    assert code == 2 and "no route echo:echo.done -> py-greet" in err


def test_config_webhook_add_and_list_name_the_secret_never_show_it(cfg):
    code, out, _ = run(
        "config", "webhook", "add", "--path", "/webhook/gh", "--plugin", "echo", "--secret-ref", "gh-secret", "--json"
    )
    assert code == 0 and json.loads(out)["webhook"]["secret_ref"] == "gh-secret"
    assert "/webhook/gh" in build_runtime(cfg.path).webhooks.by_path
    code, out, _ = run("config", "webhook", "list")
    assert code == 0 and "SecretRef: gh-secret" in out and "s3cret-value" not in out
    code, _, err = run("config", "webhook", "add", "--path", "/webhook/x", "--plugin", "echo", "--secret-ref", "nope")
    assert code == 78 and "nope" in err


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)  # the backup reads the ledger on a connection of its own
def test_config_backup_and_restore_are_system_backup_and_restore(cfg, tmp_path):
    code, out, _ = run("config", "backup", "--json")
    written = json.loads(out)
    assert code == 0 and written["scope"] == "config"
    archive = written["destination"]
    assert archive.startswith(str(cfg.path / "backups" / "config-")) and archive.endswith(".tar.gz")
    with tarfile.open(archive) as tar:
        assert {"uid.txt", "config/config.yaml", "config/tokens.yaml"} <= set(tar.getnames())
    code, out, _ = run("config", "restore", archive, "--to", str(tmp_path / "restored"), "--dry-run", "--json")
    assert code == 0 and json.loads(out)["backup_uid"] == written["backup_uid"]
    again = json.loads(run("config", "backup", "--dry-run", "--json")[1])
    assert str(cfg.path / "backups") in {e["source"] for e in again["excluded"]}  # earlier archives stay out


def test_config_schema_lists_and_prints_and_validate_checks_one_file(cfg, tmp_path):
    code, out, _ = run("config", "schema")
    assert code == 0 and out.split() == ["config", "manifest"]
    code, out, _ = run("config", "schema", "--name", "config")
    assert code == 0 and "plugin_roots" in json.loads(out)["properties"]
    assert run("config", "validate", "--file", str(cfg.path / "config.yaml"))[1].startswith("OK: ")
    bad = tmp_path / "bad.yaml"
    bad.write_text("plugins:\n  echo:\n    enabled: maybe\n")
    code, out, _ = run("config", "validate", "--file", str(bad), "--json")
    report = json.loads(out)
    assert code == 1 and report["valid"] is False and report["problems"][0]["path"] == "plugins.echo.enabled"
    code, _, err = run("config", "validate", "--file", str(tmp_path / "missing.yaml"))
    assert code == 2 and "cannot read" in err
