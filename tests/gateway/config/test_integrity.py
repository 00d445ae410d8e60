"""The seal (`.checksums`) and strict mode: spec 000 "Configuration Specification" §2 (tiered
integrity preflight: high-security files hard-fail, operational files warn unless strict_mode),
§2.1 (BLAKE3 by absolute path; moving the directory breaks the seal), §6 (interpolation after
verification, `.env` files), and "Operator Guide" Strict Mode (no start on a failed check; an API
needs a token). Every case tampers with real files and loads them as the gateway does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import blake3
import pytest
import yaml

from gateway.config.errors import ConfigError
from gateway.config.integrity import CHECKSUMS, lock, read_seal
from gateway.config.loader import config_files
from gateway.runtime import RuntimeHolder, build_runtime
from tests.support.config_dirs import ConfigDir

ENV = {"HOOK_SECRET": "s3cret", "CI_KEY": "tok-ci"}


def sealed_config(config_dir: ConfigDir, *, strict: bool = False) -> ConfigDir:
    """A config with one file of every kind: tokens.yaml + a scope file, webhooks.yaml, an
    included plugins file and a .env; sealed as `config lock` would."""
    scope = config_dir.file("scopes/ci.json", json.dumps({"scopes": ["jobs:ro"]}))
    scope_hash = "blake3:" + blake3.blake3(scope.read_bytes()).hexdigest()
    config_dir.file(
        "tokens.yaml",
        yaml.safe_dump(
            {
                "tokens": [
                    {"name": "ci", "key": "${CI_KEY}", "scopes_file": "scopes/ci.json", "scopes_hash": scope_hash},
                    {"name": "hook", "key": "${HOOK_SECRET}"},
                ]
            }
        ),
    )
    config_dir.file(
        "webhooks.yaml",
        yaml.safe_dump(
            {
                "webhooks": [
                    {
                        "name": "gh",
                        "path": "/hook/gh",
                        "plugin": "echo",
                        "secret_ref": "hook",
                        "signature_header": "X-Hub-Signature-256",
                    }
                ]
            }
        ),
    )
    config_dir.file("more-plugins.yaml", yaml.safe_dump({"plugins": {"py-greet": {"config": {"name": "Sealed"}}}}))
    config_dir.file(".env", "UNUSED=1\n")
    config_dir.extra = {
        "include": ["tokens.yaml", "webhooks.yaml", "more-plugins.yaml"],
        "environment_vars": {"include": [".env"]},
        "webhooks": {"listen": "127.0.0.1:8091"},
    }
    if strict:
        config_dir.service["strict_mode"] = True
    config_dir.write()
    return config_dir


def load(config_dir: ConfigDir, **kwargs):
    return build_runtime(config_dir.path, ENV, **kwargs)


def refusal(config_dir: ConfigDir, **kwargs) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(config_dir, **kwargs)
    return [str(p) for p in caught.value.problems]


def tamper(path: Path) -> None:
    path.write_text(path.read_text() + "\n# edited without config lock\n")


def test_a_sealed_config_loads_without_integrity_warnings(config_dir):
    runtime = load(sealed_config(config_dir))
    assert not [w for w in runtime.config.warnings if CHECKSUMS in str(w)]
    assert {t.name for t in runtime.tokens.tokens} == {"ci"}


@pytest.mark.parametrize("name", ["tokens.yaml", "webhooks.yaml", "scopes/ci.json"])
@pytest.mark.parametrize("strict", [False, True])
def test_a_tampered_high_security_file_refuses_the_config_in_every_mode(config_dir, name, strict):
    sealed_config(config_dir, strict=strict)
    tamper(config_dir.path / name)
    problems = refusal(config_dir)
    assert any(p.startswith(str(config_dir.path / name)) and "does not match .checksums" in p for p in problems)


def test_a_high_security_file_missing_from_the_seal_refuses_the_config(config_dir):
    sealed_config(config_dir)
    config_dir.file("scopes/new.json", json.dumps({"scopes": ["*"]}))  # dropped in, never locked
    problems = refusal(config_dir)
    assert any(str(config_dir.path / "scopes" / "new.json") in p and "not in .checksums" in p for p in problems)


@pytest.mark.parametrize("name", ["config.yaml", "more-plugins.yaml", ".env"])
def test_a_tampered_operational_file_warns_and_loads_unless_strict(config_dir, name):
    sealed_config(config_dir)
    tamper(config_dir.path / name)
    runtime = load(config_dir)
    warnings = [str(w) for w in runtime.config.warnings]
    assert any(w.startswith(str(config_dir.path / name)) and "does not match .checksums" in w for w in warnings)
    # `config check --strict`, or strict_mode itself, makes the same change fatal.
    assert any(str(config_dir.path / name) in p for p in refusal(config_dir, strict=True))


def test_strict_mode_in_the_config_makes_operational_tampering_fatal(config_dir):
    sealed_config(config_dir, strict=True)
    tamper(config_dir.path / "more-plugins.yaml")
    assert any("more-plugins.yaml" in p and "does not match" in p for p in refusal(config_dir))


def test_without_a_seal_operational_files_warn_but_high_security_files_refuse(config_dir):
    config_dir.sealed = False
    config_dir.write()
    runtime = load(config_dir)
    assert any("no .checksums seal" in str(w) for w in runtime.config.warnings)
    assert any("no .checksums seal" in p for p in refusal(config_dir, strict=True))
    config_dir.sealed = True
    sealed_config(config_dir)
    (config_dir.path / CHECKSUMS).unlink()
    assert any("high-security files are present" in p and "tokens.yaml" in p for p in refusal(config_dir))


def test_an_unusable_seal_is_fatal_not_the_same_as_a_missing_one(config_dir):
    config_dir.write()
    (config_dir.path / CHECKSUMS).write_text("version: 1\nfiles: {}\n")
    assert any("is not a version 2 checksums manifest" in p for p in refusal(config_dir))


def test_the_seal_never_lists_itself_and_a_second_lock_changes_nothing(config_dir):
    sealed_config(config_dir)
    seal = read_seal(config_dir.path)
    assert seal is not None and str(config_dir.path / CHECKSUMS) not in seal.hashes
    assert set(seal.hashes) == {str(p) for p in config_files(config_dir.path)}
    again = lock(config_dir.path, config_files(config_dir.path))
    assert all(f.change == "unchanged" for f in again.files) and not again.removed


def test_moving_the_config_directory_breaks_the_seal(config_dir, tmp_path):
    sealed_config(config_dir)
    moved = tmp_path / "moved"
    shutil.copytree(config_dir.path, moved)
    with pytest.raises(ConfigError) as caught:
        build_runtime(moved, ENV)
    assert any(str(moved / "tokens.yaml") in str(p) and "not in .checksums" in str(p) for p in caught.value.problems)


def test_interpolation_happens_after_verification(config_dir):
    """The seal covers the file's bytes, `${CI_KEY}` and all: new secret values need no re-lock."""
    sealed_config(config_dir)
    first = load(config_dir)
    rotated = build_runtime(config_dir.path, {**ENV, "CI_KEY": "rotated"})
    assert first.tokens.authenticate("tok-ci") is not None
    assert rotated.tokens.authenticate("rotated") is not None and rotated.tokens.authenticate("tok-ci") is None


def test_dotenv_fills_unset_variables_and_the_process_environment_wins(config_dir):
    config_dir.file(".env", "GREETING=from-dotenv\nNAME=dotenv-name\n")
    config_dir.extra = {"environment_vars": {"include": [".env"]}}
    config_dir.plugins["echo"] = {"config": {"message": "${GREETING}"}}
    config_dir.service["name"] = "${NAME}"
    config_dir.write()
    runtime = build_runtime(config_dir.path, {"NAME": "from-process"})
    assert runtime.config.plugins["echo"].config["message"] == "from-dotenv"
    assert runtime.config.service.name == "from-process"


def test_strict_mode_refuses_an_enabled_plugin_that_cannot_run(config_dir):
    config_dir.plugins["ghost"] = {"config": {}}
    config_dir.plugins["off-ghost"] = {"uses": "nope", "enabled": False}
    config_dir.service["strict_mode"] = True
    config_dir.extra = {"api": {"enabled": False}}
    config_dir.write()
    problems = refusal(config_dir)
    assert any("key plugins.ghost" in p and "cannot run: no plugin named 'ghost'" in p for p in problems)
    assert not any("off-ghost" in p for p in problems)  # disabled: not held against the config
    del config_dir.plugins["ghost"]
    config_dir.write()
    assert load(config_dir).config.service.strict_mode is True


def test_strict_mode_requires_a_usable_api_token_while_the_api_is_enabled(config_dir):
    config_dir.service["strict_mode"] = True
    config_dir.write()
    assert any("strict_mode requires at least one API token" in p for p in refusal(config_dir))
    # A token whose scope file fails its hash is refused, and does not count either.
    config_dir.file("scopes/x.json", json.dumps({"scopes": ["*"]}))
    config_dir.file(
        "tokens.yaml",
        yaml.safe_dump(
            {"tokens": [{"name": "x", "key": "k", "scopes_file": "scopes/x.json", "scopes_hash": "blake3:00"}]}
        ),
    )
    config_dir.extra = {"include": ["tokens.yaml"]}
    config_dir.write()
    assert any("strict_mode requires at least one API token" in p for p in refusal(config_dir))
    config_dir.extra = {"api": {"auth": {"tokens": [{"name": "admin", "token": "t", "scopes": ["*"]}]}}}
    config_dir.write()
    assert load(config_dir).tokens.authenticate("t") is not None
    config_dir.extra = {"api": {"enabled": False}}
    config_dir.write()
    assert load(config_dir).config.service.strict_mode is True


def test_a_reload_refused_by_the_seal_keeps_the_running_config(config_dir, monkeypatch):
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)  # a reload reads the process environment
    sealed_config(config_dir)
    holder = RuntimeHolder()
    holder.load(config_dir.path)
    running = holder.get()
    tamper(config_dir.path / "tokens.yaml")
    with pytest.raises(ConfigError) as caught:
        holder.reload()
    assert any("tokens.yaml" in str(p) and "does not match .checksums" in str(p) for p in caught.value.problems)
    assert holder.get() is running
