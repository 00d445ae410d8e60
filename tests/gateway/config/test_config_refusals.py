"""What `config check` refuses or warns about, as the original Ductile does (issue 35): the tick
floor, empty and missing plugin roots, the plugin environment, the admission gates
(`service.admission`, `strict_mode`, `--strict`), plugin timeouts for custom commands, and `api:`
and `webhooks:`, checked by the schema like every other section (issue 37).
Driven in-process through `config check --json` (its exit code and its answer), on real config
directories with the bundled and test plugin roots."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command

from gateway.config.errors import ConfigError, ConfigProblem
from gateway.config.model import load_gateway_config
from gateway.runtime import RUNTIME, build_runtime
from tests.support.checkout import REPO
from tests.support.config_dirs import ConfigDir
from tests.support.jobs import last_response, run_job
from tests.support.runtime import installed_runtime
from tests.support.webhooks import ENV, endpoint, write_config


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


def test_the_originals_history_retention_keys_are_read_not_warned(config_dir: ConfigDir) -> None:
    """The original's example config (spec 000 §4.1); before: each warned as ignored."""
    config_dir.service.update(
        job_transitions_retention="30d", job_attempts_retention="7d", breaker_transitions_retention="90d"
    )
    config_dir.write()
    code, body = check(config_dir)
    assert code == 0, body
    assert not [w for w in body["warnings"] if "retention" in w], body["warnings"]
    service = load_gateway_config(config_dir.path).service
    assert (service.job_transitions_retention, service.job_attempts_retention) == (30 * 86400, 7 * 86400)
    assert service.breaker_transitions_retention == 90 * 86400


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


# -- api and webhooks ----------------------------------------------------------------------------


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The variables tokens.yaml of tests.support.webhooks reads, for `config check`."""
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)


def with_api(config_dir: ConfigDir, text: str) -> None:
    config_dir.extra["include"] = ["api.yaml"]
    config_dir.file("api.yaml", text)
    config_dir.write()


def refusals(config_dir: ConfigDir) -> list[ConfigProblem]:
    try:
        build_runtime(config_dir.path, {**os.environ, **ENV})
    except ConfigError as exc:
        return list(exc.problems)
    return []


@pytest.mark.parametrize(
    ("text", "key", "line", "message"),
    [
        ("api:\n  enabled: maybe\n", "api.enabled", 2, "'maybe' is not of type 'boolean'"),
        (
            "api:\n  listen: localhost:99999\n",
            "api.listen",
            2,
            "expected host:port such as 127.0.0.1:8080, or a bare host (port 8080), got 'localhost:99999'",
        ),
        ("api:\n  listen: 8080\n", "api.listen", 2, "8080 is not of type 'string'"),
        ("api:\n  max_concurrent_sync: 0\n", "api.max_concurrent_sync", 2, "0 is less than the minimum of 1"),
        ("api:\n  max_streams: true\n", "api.max_streams", 2, "True is not of type 'integer'"),
        ("api:\n  max_streams_per_token: -1\n", "api.max_streams_per_token", 2, "-1 is less than the minimum of 1"),
        ("api:\n  max_sync_timeout: soon\n", "api.max_sync_timeout", 2, "expected a duration such as 30s"),
        ("api:\n  auth:\n    tokens: {}\n", "api.auth.tokens", 3, "{} is not of type 'array'"),
        ("api:\n  auth:\n    tokens:\n      - tok\n", "api.auth.tokens[0]", 4, "'tok' is not of type 'object'"),
        ("api:\n  auth:\n    tokens:\n      - scopes: all\n", "api.auth.tokens[0].scopes", 4, "'all' is not of type"),
        ("api:\n  allowed_origins: https://a.example\n", "api.allowed_origins", 2, "is not of type 'array'"),
        (
            "api:\n  allowed_origins:\n    - https://a.example\n    - https://b.example/\n",
            "api.allowed_origins[1]",
            4,
            "expected an origin as a browser sends it, such as https://app.example.com or http://localhost:5173 "
            "(scheme, host, optional port; no path or trailing slash), got 'https://b.example/'",
        ),
    ],
)
def test_a_bad_api_value_is_refused_at_its_file_line_and_key(
    config_dir: ConfigDir, text: str, key: str, line: int, message: str
) -> None:
    with_api(config_dir, text)
    code, body = check(config_dir)
    assert code == 78
    (error,) = body["errors"]
    assert (error["key"], error["line"], error["file"]) == (key, line, str(config_dir.path / "api.yaml"))
    assert message in error["message"]


def test_the_api_is_typed_with_its_defaults_and_the_forms_it_accepted_before(config_dir: ConfigDir) -> None:
    """A bare host takes port 8080; `enabled: yes` is true, as for every boolean of the config; empty
    origins are ignored; an unquoted `${VAR}` of digits is a token all the same."""
    with_api(
        config_dir,
        "api:\n  enabled: yes\n  listen: ' 0.0.0.0 '\n  max_sync_timeout: 2m\n"
        "  allowed_origins: ['', ' https://a.example:8443 ', null]\n"
        "  auth:\n    tokens:\n      - token: ${DIGITS}\n        scopes: ['*']\n      - token:\n",
    )
    api = build_runtime(config_dir.path, {**os.environ, "DIGITS": "12345678"}).config.api
    assert (api.enabled, str(api.listen), api.max_sync_timeout) == (True, "0.0.0.0:8080", 120.0)
    assert (api.max_concurrent_sync, api.max_streams, api.max_streams_per_token) == (10, 512, 64)
    assert api.allowed_origins == {"https://a.example:8443"}
    assert [(t.name, t.token, t.scopes) for t in api.tokens] == [
        ("api.auth.tokens[0]", "12345678", ("*",)),
        ("api.auth.tokens[1]", "", ()),
    ]


def test_an_unknown_api_key_warns_and_strict_refuses_it(config_dir: ConfigDir) -> None:
    """Before, `api:` was an untyped mapping: `listn:` was dropped without a word and the API
    served on its default address."""
    with_api(config_dir, "api:\n  enabled: false\n  listn: 0.0.0.0:9000\n")
    code, body = check(config_dir)
    assert code == 0
    assert f"{config_dir.path / 'api.yaml'}:3 key api.listn: unknown key 'listn' is ignored" in body["warnings"]
    code, body = check(config_dir, "--strict")
    assert code == 78
    refused = [e for e in body["errors"] if e["key"] == "api.listn"]
    assert [(e["line"], e["message"]) for e in refused] == [
        (3, "unknown key 'listn' (refused: validate_config_on_boot)")
    ]


@pytest.mark.parametrize(
    ("webhooks", "key", "line", "message"),
    [
        (
            "webhooks:\n  listen: 127.0.0.1:8091\n  endpoint: []\n",
            "webhooks.endpoint",
            3,
            "unknown key 'endpoint' (expected listen, endpoints)",
        ),
        (
            "webhooks:\n  secret: hunter2\n",
            "webhooks.secret",
            2,
            "an inline secret is not accepted: define it in tokens.yaml and name it in secret_ref",
        ),
        ("webhooks:\n  listen: 127.0.0.1:0\n", "webhooks.listen", 2, "expected host:port such as 127.0.0.1:8081"),
        (endpoint(command=""), "webhooks.endpoints[0].command", 8, "'' should be non-empty"),
        (endpoint(name=7), "webhooks.endpoints[0].name", 3, "7 is not of type 'string'"),
    ],
)
@pytest.mark.usefixtures("secrets")
def test_a_bad_webhooks_key_is_refused_without_strict_mode(
    config_dir: ConfigDir, webhooks: str, key: str, line: int, message: str
) -> None:
    write_config(config_dir, webhooks)
    code, body = check(config_dir)
    assert code == 78
    (error,) = body["errors"]
    assert (error["key"], error["line"], error["file"]) == (key, line, str(config_dir.path / "webhooks.yaml"))
    assert message in error["message"]


def test_each_missing_key_of_an_endpoint_is_named_on_its_own(config_dir: ConfigDir) -> None:
    write_config(config_dir, endpoint(plugin=None, secret_ref=None, signature_header=None))
    assert [(p.key, p.line, p.message) for p in refusals(config_dir)] == [
        ("webhooks.endpoints[0].plugin", 3, "missing required key 'plugin'"),
        ("webhooks.endpoints[0].secret_ref", 3, "missing required key 'secret_ref'"),
        ("webhooks.endpoints[0].signature_header", 3, "missing required key 'signature_header'"),
    ]


def test_webhook_problems_come_with_the_rest_of_the_configs(config_dir: ConfigDir) -> None:
    """Before, webhooks.yaml was read only once the rest of the config had passed: a bad header
    showed up after `max_workers` was fixed. Now one check names both."""
    config_dir.service["max_workers"] = 0
    write_config(config_dir, endpoint(signature_header="X_Sig"))
    assert [(p.key, p.message) for p in refusals(config_dir)] == [
        ("service.max_workers", "0 is less than the minimum of 1"),
        (
            "webhooks.endpoints[0].signature_header",
            "expected a header name of letters, digits and - carrying the signature (gunicorn drops names "
            "with _), got 'X_Sig'",
        ),
    ]


def test_a_refused_api_section_does_not_hide_the_typed_checks_of_others(config_dir: ConfigDir) -> None:
    """`api.auth: open` cannot be typed; the retention under `dedupe_ttl`, which only the typed
    checks see, is reported with it all the same."""
    config_dir.service["job_queue_retention"] = "1h"
    with_api(config_dir, "api:\n  auth: open\n")
    assert [p.key for p in refusals(config_dir)] == ["api.auth", "service.job_queue_retention"]


def test_the_reference_lists_every_api_and_webhooks_key() -> None:
    page = (REPO / "docs" / "guide" / "config-reference.md").read_text()
    for section, keys in {
        "api": ("enabled", "listen", "auth", "max_concurrent_sync", "max_sync_timeout", "allowed_origins"),
        "api.auth.tokens[]": ("name", "token", "scopes"),
        "webhooks": ("listen", "endpoints"),
        "webhooks.endpoints[]": ("name", "path", "plugin", "command", "secret_ref", "signature_header"),
    }.items():
        table = page.split(f"## `{section}`\n", 1)[1].split("\n## ", 1)[0]
        assert all(f"| `{key}`" in table for key in keys), (section, table)


def test_each_missing_key_of_any_section_is_named_once(config_dir: ConfigDir) -> None:
    """jsonschema reports one error per missing key; each used to be described as the first
    missing key, so `backup: {keep: 3}` said `schedule` twice and never `directory`."""
    config_dir.service["backup"] = {"keep": 3}
    config_dir.write()
    assert [(p.key, p.message) for p in refusals(config_dir)] == [
        ("service.backup.directory", "missing required key 'directory'"),
        ("service.backup.schedule", "missing required key 'schedule'"),
    ]


def test_config_validate_checks_a_webhooks_yaml_in_either_form(
    config_dir: ConfigDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`config validate` reads one file, unmerged: webhooks.yaml's bare list of endpoints is
    checked as the endpoints of `webhooks:` are."""
    monkeypatch.setenv("DUCTILE_CONFIG_DIR", str(config_dir.path))
    listed = config_dir.file("webhooks.yaml", endpoint().replace("webhooks:\n  endpoints:\n", "webhooks:\n"))
    mapped = config_dir.file("mapped.yaml", endpoint(comand="poll"))
    for file in (listed, mapped):
        out = io.StringIO()
        try:
            call_command("config", "validate", "--file", str(file), "--json", stdout=out, stderr=io.StringIO())
        except SystemExit:
            pass
        report = json.loads(out.getvalue())
        assert report["valid"] is (file == listed), report
    assert report["problems"] == [
        {
            "path": "webhooks.endpoints[0].comand",
            "message": "unknown key 'comand' (expected name, path, plugin, command, secret_ref, signature_header, "
            "max_body_size)",
        }
    ]
