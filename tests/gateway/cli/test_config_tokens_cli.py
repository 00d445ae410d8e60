"""`config token list|inspect|delete` and `config scope add|remove|set|validate` (the Operator
Handbook's and the original's), in-process: what an operator sees, and whether the token the
files describe still works (or no longer does) in a runtime built from them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.config.errors import ConfigError
from gateway.config.integrity import read_seal
from gateway.runtime import build_runtime
from tests.gateway.cli.test_cli_surface import run
from tests.support.config_dirs import ConfigDir
from tests.support.runtime import installed_runtime


@pytest.fixture
def token(config_dir: ConfigDir):
    """A config with one registry token, `ci-bot`, made as an operator makes one."""
    with installed_runtime(config_dir):
        code, out, err = run("config", "token", "create", "--name", "ci-bot", "--scopes", "jobs:ro,echo:rw", "--json")
        assert code == 0, err
        yield json.loads(out)["token"]


def authenticated(config: Path, secret: str):
    return build_runtime(config).tokens.authenticate(secret)


def test_token_list_and_inspect_show_names_scopes_and_the_hash_check_never_the_key(config_dir, token):
    code, out, _ = run("config", "token", "list", "--json")
    listed = json.loads(out)["tokens"]
    assert code == 0 and token not in out
    assert [(t["name"], t["scopes"], t["key"], t["hash_matches"]) for t in listed] == [
        ("ci-bot", ["jobs:ro", "echo:rw"], "[redacted]", True)
    ]
    code, out, _ = run("config", "token", "inspect", "ci-bot")
    assert code == 0 and "Hash check: match" in out and "  - echo:rw" in out and token not in out

    scope_file = config_dir.path / "scopes" / "ci-bot.json"
    scope_file.write_text(scope_file.read_text().replace("jobs:ro", "jobs:rw"))  # edited by hand
    shown = json.loads(run("config", "token", "inspect", "ci-bot", "--json")[1])
    assert shown["hash_matches"] is False and shown["current_hash"] != shown["scopes_hash"]
    code, _, err = run("config", "token", "inspect", "nobody")
    assert code == 2 and "no token named 'nobody'" in err and "known: ci-bot" in err


def test_scope_add_remove_and_set_rewrite_the_scope_file_and_its_hash_so_the_token_keeps_working(config_dir, token):
    code, out, _ = run("config", "scope", "add", "ci-bot", "plugin:ro", "--dry-run", "--json")
    assert code == 0 and json.loads(out)["scopes"] == ["jobs:ro", "echo:rw", "plugin:ro"]
    assert not authenticated(config_dir.path, token).allows("plugin:ro")  # a dry run wrote nothing

    assert run("config", "scope", "add", "ci-bot", "plugin:ro")[0] == 0
    granted = authenticated(config_dir.path, token)
    assert granted is not None and granted.allows("plugin:ro") and granted.allows("echo:rw")
    assert run("config", "scope", "remove", "ci-bot", "echo:rw")[0] == 0
    assert not authenticated(config_dir.path, token).allows("echo:rw")
    code, out, _ = run("config", "scope", "set", "ci-bot", "jobs:ro", "--json")
    assert code == 0 and json.loads(out)["scopes"] == ["jobs:ro"]
    seal = read_seal(config_dir.path)
    assert seal is not None and str(config_dir.path / "scopes" / "ci-bot.json") in seal.hashes

    code, _, err = run("config", "scope", "add", "ci-bot", "ghost:rw")
    assert code == 2 and "no plugin 'ghost' is configured" in err
    code, _, err = run("config", "scope", "remove", "ci-bot", "jobs:ro")
    assert code == 2 and "would be left with no scope" in err
    assert run("config", "scope", "validate", "echo:ro")[0] == 0
    code, out, _ = run("config", "scope", "validate", "jobs:admin", "--json")
    assert code == 1 and json.loads(out)["valid"] is False


def test_token_delete_removes_the_entry_and_its_secret_and_keeps_the_scope_file(config_dir, token):
    env = config_dir.path / ".env"
    code, out, _ = run("config", "token", "delete", "ci-bot", "--dry-run", "--json")
    assert code == 0 and json.loads(out)["dry_run"] is True
    assert authenticated(config_dir.path, token) is not None and "DUCTILE_TOKEN_CI_BOT=" in env.read_text()

    code, out, _ = run("config", "token", "delete", "ci-bot")
    assert code == 0 and "its scope file scopes/ci-bot.json is kept" in out
    assert authenticated(config_dir.path, token) is None
    assert "DUCTILE_TOKEN_CI_BOT" not in env.read_text()
    assert (config_dir.path / "scopes" / "ci-bot.json").exists()
    assert json.loads(run("config", "token", "list", "--json")[1])["tokens"] == []
    code, _, err = run("config", "token", "delete", "ci-bot")
    assert code == 2 and "no token named 'ci-bot'" in err


def test_token_rehash_authorizes_a_hand_edited_scope_file(config_dir, token):
    """The original's `token rehash`: before it, the edited scope file refuses the config (its hash
    and the seal no longer match); after it, the token loads with the scopes the edit gave it."""
    scope_file = config_dir.path / "scopes" / "ci-bot.json"
    scope_file.write_text(scope_file.read_text().replace("jobs:ro", "jobs:rw"))
    with pytest.raises(ConfigError):
        build_runtime(config_dir.path)
    code, out, _ = run("config", "token", "rehash", "ci-bot", "--dry-run", "--json")
    assert code == 0 and json.loads(out)["new_hash"] != json.loads(out)["old_hash"]
    with pytest.raises(ConfigError):
        build_runtime(config_dir.path)  # a dry run wrote nothing
    code, out, _ = run("config", "token", "rehash", "ci-bot")
    assert code == 0 and out.startswith("recorded blake3:")
    granted = authenticated(config_dir.path, token)
    assert granted is not None and granted.allows("jobs:rw")
    assert json.loads(run("config", "token", "inspect", "ci-bot", "--json")[1])["hash_matches"] is True
