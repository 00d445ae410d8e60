"""What `config check` refuses or warns about, as the original Ductile does (issue 35): the tick
floor, empty and missing plugin roots, the plugin environment, the admission gates
(`service.admission`, `strict_mode`, `--strict`), and plugin timeouts for custom commands.
Driven in-process through `config check --json` (its exit code and its answer), on real config
directories with the bundled and test plugin roots."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command

from gateway.runtime import RUNTIME, build_runtime
from tests.support.config_dirs import ConfigDir
from tests.support.jobs import last_response, run_job
from tests.support.runtime import installed_runtime


def check(config_dir: ConfigDir, *args: str) -> tuple[int, dict[str, Any]]:
    """`ductile config check --json [args]` in this process: (exit code, answer)."""
    previous = (RUNTIME._current, RUNTIME.error, RUNTIME.config_dir)
    RUNTIME.load(config_dir.path)
    out = io.StringIO()
    code = 0
    try:
        call_command("config", "check", *args, "--json", stdout=out, stderr=io.StringIO())
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        RUNTIME._current, RUNTIME.error, RUNTIME.config_dir = previous
    return code, json.loads(out.getvalue())


def line_of(path: Path, needle: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), start=1) if needle in line)


def errors_by_key(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["key"]: e for e in body["errors"]}


# -- the tick floor ------------------------------------------------------------------------------


def test_a_tick_below_100ms_is_refused_at_its_file_line_and_key(config_dir: ConfigDir) -> None:
    config_dir.service["tick_interval"] = "50ms"
    config_dir.write()
    code, body = check(config_dir)
    assert code == 78
    error = errors_by_key(body)["service.tick_interval"]
    assert "below the minimum 100ms" in error["message"]
    assert (error["file"], error["line"]) == (
        str(config_dir.path / "config.yaml"),
        line_of(config_dir.path / "config.yaml", "tick_interval"),
    )
    config_dir.service["tick_interval"] = "100ms"  # the floor itself is allowed (doctor warns)
    config_dir.write()
    assert check(config_dir)[0] == 0


# -- plugin roots --------------------------------------------------------------------------------


def test_an_empty_plugin_root_is_refused_at_its_line(config_dir: ConfigDir) -> None:
    config_dir.write()
    text = (config_dir.path / "config.yaml").read_text()
    (config_dir.path / "config.yaml").write_text(text.replace("plugin_roots:\n", "plugin_roots:\n- ''\n"))
    config_dir.lock()
    code, body = check(config_dir)
    assert code == 78
    error = errors_by_key(body)["plugin_roots[0]"]
    assert "an empty path is not allowed" in error["message"]
    assert error["line"] == line_of(config_dir.path / "config.yaml", "- ''")


def test_a_missing_plugin_root_is_an_error_naming_the_entry(config_dir: ConfigDir, tmp_path: Path) -> None:
    config_dir.write()
    missing = tmp_path / "no-such-root"
    doc = yaml.safe_load((config_dir.path / "config.yaml").read_text())
    doc["plugin_roots"].append(str(missing))
    (config_dir.path / "config.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    config_dir.lock()
    code, body = check(config_dir)
    assert code == 78
    error = errors_by_key(body)["plugin_roots[2]"]
    assert error["message"] == f"plugin root {missing} does not exist"
    assert error["line"] == line_of(config_dir.path / "config.yaml", str(missing))
    missing.mkdir()
    assert check(config_dir)[0] == 0


# -- the plugin environment ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # the jobs run on the worker's thread, on its own connection
def test_a_plugin_gets_language_and_an_empty_passthrough_name_is_ignored(
    config_dir: ConfigDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANGUAGE", "en_AU:en")
    monkeypatch.setenv("MY_FLAG", "1")
    monkeypatch.setenv("NOT_PASSED", "x")
    config_dir.service["plugin_env_passthrough"] = ["", "MY_FLAG"]
    config_dir.write()
    assert check(config_dir)[0] == 0
    with installed_runtime(config_dir) as holder:
        env = last_response(run_job(holder, "probe"))["result"]["env"]
    assert env["LANGUAGE"] == "en_AU:en" and env["MY_FLAG"] == "1"
    assert "NOT_PASSED" not in env and "" not in env


# -- admission gates -----------------------------------------------------------------------------


def test_strict_turns_an_unknown_key_into_an_error_with_exit_78(config_dir: ConfigDir) -> None:
    config_dir.service["tick_intervall"] = "30s"
    config_dir.extra = {"api": {"enabled": False}}
    config_dir.write()
    code, body = check(config_dir)
    assert code == 0 and any("unknown key 'tick_intervall' is ignored" in w for w in body["warnings"])
    code, body = check(config_dir, "--strict")
    assert code == 78 and body["strict"] is True
    error = errors_by_key(body)["service.tick_intervall"]
    assert "unknown key 'tick_intervall'" in error["message"]
    assert error["line"] == line_of(config_dir.path / "config.yaml", "tick_intervall")


def test_strict_mode_keeps_the_originals_own_keys_as_warnings(config_dir: ConfigDir) -> None:
    """The original's config sets `strict_mode: true` beside its `secrets:` vault block, which
    this gateway does not implement: it still loads, with the key warned as ignored."""
    config_dir.service["strict_mode"] = True
    config_dir.extra = {"api": {"enabled": False}, "secrets": {"vault_file": "vault.age"}}
    config_dir.write()
    code, body = check(config_dir)
    assert code == 0, body
    assert any("unknown key 'secrets' is ignored" in w for w in body["warnings"])


def test_the_admission_block_sets_each_gate_on_its_own(config_dir: ConfigDir) -> None:
    """`require_api_auth` alone: an enabled API without a token is refused; an unknown key and an
    unsealed edit still only warn. `strict_mode: true` beside the block is ignored, with a warning."""
    config_dir.service["admission"] = {"require_api_auth": True}
    config_dir.service["strict_mode"] = True
    config_dir.service["colour"] = "blue"
    config_dir.extra = {"api": {"enabled": True, "listen": "127.0.0.1:18999"}}
    config_dir.write()
    (config_dir.path / "config.yaml").write_text((config_dir.path / "config.yaml").read_text() + "# unsealed\n")
    code, body = check(config_dir)
    assert code == 78
    assert list(errors_by_key(body)) == ["api.auth.tokens"]
    assert "require_api_auth requires at least one API token" in body["errors"][0]["message"]
    config_dir.extra = {"api": {"enabled": False}}
    config_dir.write()
    (config_dir.path / "config.yaml").write_text((config_dir.path / "config.yaml").read_text() + "# unsealed\n")
    code, body = check(config_dir)
    assert code == 0
    warnings = "\n".join(body["warnings"])
    assert "unknown key 'colour' is ignored" in warnings and "does not match .checksums" in warnings
    assert "strict_mode is ignored: service.admission sets the gates" in warnings
    config_dir.service["admission"] = {"fail_on_drift": True, "validate_config_on_boot": True}
    config_dir.write()
    (config_dir.path / "config.yaml").write_text((config_dir.path / "config.yaml").read_text() + "# unsealed\n")
    code, body = check(config_dir)
    assert code == 78
    messages = [e["message"] for e in body["errors"]]
    assert any("does not match .checksums" in m for m in messages)
    assert any("unknown key 'colour' (refused: validate_config_on_boot)" in m for m in messages)
    assert not any("API token" in m for m in messages)


def test_an_unknown_admission_gate_is_warned(config_dir: ConfigDir) -> None:
    config_dir.service["admission"] = {"fail_on_drift": False, "verify_everything": True}
    config_dir.write()
    code, body = check(config_dir)
    assert code == 0 and any("unknown key 'verify_everything' is ignored" in w for w in body["warnings"])


# -- per-command timeouts ------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "seconds"), [("poll", 5.0), ("burn", 7.0)])
def test_per_command_timeouts_are_written_inline_as_the_original_reads_them(
    config_dir: ConfigDir, key: str, seconds: float
) -> None:
    """The original's `timeouts:` holds poll/handle/health/init and any custom command inline
    (`timeouts: {cpu: 15s}`), each winning over the plugin-level `timeout:`."""
    config_dir.plugins["stress"]["timeouts"] = {key: f"{seconds:g}s"}
    config_dir.write()
    assert check(config_dir)[0] == 0
    stress = build_runtime(config_dir.path).config.plugins["stress"]
    assert stress.timeout_for(key) == seconds
    assert stress.timeout_for("handle") == 20.0  # the plugin's `timeout: 20s`


# -- schedules -----------------------------------------------------------------------------------


def test_the_legacy_schedule_key_is_refused_with_the_fix(config_dir: ConfigDir) -> None:
    config_dir.plugins["echo"]["schedule"] = {"every": "5m"}
    config_dir.write()
    code, body = check(config_dir)
    assert code == 78
    error = errors_by_key(body)["plugins.echo.schedule"]
    assert "use `schedules:`" in error["message"]
    assert error["line"] == line_of(config_dir.path / "config.yaml", "schedule:")


def test_a_schedule_naming_a_command_the_plugin_lacks_is_refused_at_its_entry(config_dir: ConfigDir) -> None:
    config_dir.plugins["echo"]["schedules"] = [{"every": "5m"}, {"id": "nightly", "every": "1d", "command": "sync"}]
    config_dir.write()
    code, body = check(config_dir)
    assert code == 78
    error = errors_by_key(body)["plugins.echo.schedules[1].command"]
    assert error["message"].startswith(
        "schedule \"nightly\": plugin 'echo' has no command 'sync' (its manifest declares"
    )
    assert error["line"] == line_of(config_dir.path / "config.yaml", "command: sync")
    config_dir.plugins["echo"]["schedules"][1]["command"] = "health"
    config_dir.write()
    assert check(config_dir)[0] == 0


def test_strict_fails_on_any_warning_at_its_place(config_dir: ConfigDir) -> None:
    """As the original's `config check --strict` (`--fail-on-warnings`): a warning fails it too."""
    config_dir.plugins["echo"]["schedules"] = [{"every": "5m", "preferred_window": "08:00-18:00"}]
    config_dir.extra = {"api": {"enabled": False}}
    config_dir.write()
    code, body = check(config_dir)
    assert code == 0 and any("preferred_window" in w and "not enforced" in w for w in body["warnings"])
    code, body = check(config_dir, "--strict")
    assert code == 78 and body["valid"] is False and body["warnings"] == []
    error = errors_by_key(body)["plugins.echo.schedules[0].preferred_window"]
    assert "accepted but not enforced" in error["message"] and error["line"]
