"""Issue 12, defect 11: `config check --strict` on an unsealed directory reported only the missing
seal and hid every other error. Every problem is reported at once, each naming its file, line and
key (Operator Handbook, "Config": `config check` validates syntax, schema, semantics, integrity
and plugin references; spec "Operator Guide", Strict Mode)."""

from __future__ import annotations

import pytest

from tests.support.processes import ductile_json

pytestmark = [pytest.mark.process]


def errors(cfg, *args: str) -> list[dict]:
    code, report = ductile_json(cfg, "config", "check", *args)
    assert code == 78 and not report["valid"], report
    return report["errors"]


def has(found: list[dict], fragment: str, key: str | None = None) -> bool:
    return any(fragment in e["message"] and (key is None or e["key"] == key) for e in found)


@pytest.fixture
def unsealed(config_dir):
    """Schema-valid, but wrong past the schema: every later check has something to say."""
    config_dir.sealed = False
    config_dir.plugins["nosuch"] = {"config": {}}  # no such plugin: strict mode refuses it
    config_dir.extra["pipelines"] = [{"name": "p", "on": "go", "steps": [{"id": "a", "uses": "ghost"}]}]
    config_dir.extra["webhooks"] = {
        "listen": "127.0.0.1:8091",
        "endpoints": [{"path": "/hook/e", "plugin": "echo", "secret_ref": "missing", "signature_header": "X-S"}],
    }
    config_dir.write()
    return config_dir


def test_strict_check_of_an_unsealed_directory_reports_every_problem(unsealed):
    found = errors(unsealed, "--strict")
    assert has(found, "no .checksums seal"), found
    assert has(found, "unknown plugin or alias 'ghost'", "pipelines[0].steps[0].uses"), found
    assert has(found, "missing", "webhooks.endpoints[0].secret_ref") or has(found, "'missing'"), found
    assert has(found, "plugin 'nosuch' cannot run", "plugins.nosuch"), found
    assert has(found, "requires at least one API token"), found
    assert all(e["file"] for e in found), found


def test_check_without_strict_reports_every_problem_but_the_seal(unsealed):
    found = errors(unsealed)
    assert not has(found, "no .checksums seal"), found
    assert has(found, "unknown plugin or alias 'ghost'"), found
    assert has(found, "missing", "webhooks.endpoints[0].secret_ref") or has(found, "'missing'"), found


def test_an_unsealed_high_security_file_is_reported_with_the_schema_errors(config_dir):
    config_dir.sealed = False
    config_dir.service["max_workers"] = "many"
    config_dir.extra["include"] = ["tokens.yaml"]
    config_dir.file("tokens.yaml", "tokens:\n  - name: hook\n    key: secret\n")
    config_dir.write()
    found = errors(config_dir)
    assert has(found, "high-security files are present"), found
    assert has(found, "'many' is not of type 'integer'", "service.max_workers"), found
