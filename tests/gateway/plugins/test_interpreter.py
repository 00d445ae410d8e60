"""A plugin whose entrypoint's interpreter is missing is skipped at load with that reason (spec
000 §5.5: the shebang picks the interpreter; issue 34: ts-bun-greet where Bun is absent). Real
plugin directories and real lookups on the PATH plugins get; nothing runnable is ever skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.operations.doctor import ERROR, INFO, diagnose
from gateway.plugins.discovery import discover_plugins
from gateway.plugins.interpreter import missing_interpreter
from gateway.runtime import build_runtime
from tests.support.config_dirs import ConfigDir

MISSING = "ductile-test-no-such-interpreter"


def script(tmp_path: Path, first_line: bytes) -> Path:
    path = tmp_path / "run"
    path.write_bytes(first_line + b"\necho '{}'\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(
    "line",
    [
        b"#!/bin/sh",
        b"#! /bin/sh -e",
        b"#!/usr/bin/env sh",
        b"#!/usr/bin/env -S sh -e",
        b"#!/usr/bin/env LANG=C sh",
        b"\x7fELF",  # not a script: nothing to judge
        # What cannot be read with certainty is left to the spawn, never skipped:
        b"#!/usr/bin/env -u HOME " + MISSING.encode(),
        b"#!/usr/bin/env PATH=/opt/x " + MISSING.encode(),
        b"#!relative/interpreter",
    ],
)
def test_an_interpreter_that_is_there_or_uncertain_is_not_judged(tmp_path: Path, line: bytes) -> None:
    assert missing_interpreter(script(tmp_path, line), "/usr/bin:/bin") is None


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (f"#!/usr/bin/env {MISSING}", f"interpreter '{MISSING}' is not on the plugins' PATH (/usr/bin:/bin)"),
        (f"#!/usr/bin/env -S {MISSING} --flag", f"interpreter '{MISSING}' is not on the plugins' PATH"),
        ("#!/opt/ductile-test/bin/bun", "interpreter '/opt/ductile-test/bin/bun' does not exist"),
        ("#!/bin/sh\r", None),  # a CRLF file: the kernel would look for "sh\r"; not judged here
    ],
)
def test_a_missing_interpreter_is_named_with_the_shebang(tmp_path: Path, line: str, reason: str | None) -> None:
    found = missing_interpreter(script(tmp_path, line.encode()), "/usr/bin:/bin")
    if reason is None:
        assert found is None
    else:
        assert found is not None and found.startswith(reason)
        assert found.endswith(f"(entrypoint run starts with {line.strip()!r})")


def plugin(root: Path, name: str, shebang: str) -> None:
    directory = root / name
    directory.mkdir(parents=True)
    (directory / "manifest.yaml").write_text(
        f"manifest_spec: ductile.plugin\nmanifest_version: 1\nname: {name}\nversion: 1\nprotocol: 2\n"
        "entrypoint: run\ncommands: [{name: poll, type: write}]\n"
    )
    (directory / "run").write_text(f"{shebang}\necho '{{}}'\n")
    (directory / "run").chmod(0o755)


def test_the_registry_skips_an_instance_and_the_doctor_names_it(tmp_path: Path, config_dir: ConfigDir) -> None:
    root = tmp_path / "roots"
    plugin(root, "needs-missing", f"#!/usr/bin/env {MISSING}")
    plugin(root, "unused-missing", f"#!/usr/bin/env {MISSING}")
    plugin(root, "fine", "#!/bin/sh")
    config_dir.plugins = {
        "needs-missing": {"config": {}},
        "alias": {"uses": "needs-missing", "config": {}},
        "off": {"uses": "needs-missing", "enabled": False},
        "fine": {"config": {}},
    }
    config_dir.extra = {"plugin_roots": [str(root)]}
    config_dir.write()

    runtime = build_runtime(config_dir.path)
    registry = runtime.registry
    reason = registry.discovery.manifests["needs-missing"].cannot_run
    assert reason is not None and f"interpreter '{MISSING}'" in reason
    assert registry.skipped["needs-missing"] == registry.skipped["alias"] == reason
    assert "fine" in registry.instances and "off" in registry.disabled
    assert any(f"plugin 'alias' skipped: {reason}" in str(w) for w in registry.warnings)

    found = {(f.check, f.severity, f.message) for f in diagnose(runtime)}
    assert ("interpreter_missing", ERROR, f"plugin 'alias' is enabled but cannot run: {reason}") in found
    unused = f"plugin 'unused-missing' is discovered but cannot run here: {reason}"
    assert ("interpreter_missing", INFO, unused) in found
    assert not any("'off'" in message for _, _, message in found)


def test_discovery_of_the_bundled_plugins_judges_each_against_the_plugins_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it
    found = discover_plugins((Path(__file__).resolve().parents[3] / "plugins",))
    assert "'bun'" in (found.manifests["ts-bun-greet"].cannot_run or "")
    assert "'python3'" in (found.manifests["py-greet"].cannot_run or "")
    assert "'bash'" in (found.manifests["restic_backup"].cannot_run or "")
