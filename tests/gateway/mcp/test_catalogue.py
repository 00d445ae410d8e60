"""The MCP tool catalogue per caller (gateway/mcp/catalogue.py), in-process: which tools each API
scope shows, what a plugin command's tool says of it, and that the listing follows the runtime."""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator

from gateway.config.tokens import ApiToken, normalise
from gateway.mcp.catalogue import VERB_NAMES, Caller, catalogue
from gateway.runtime import RUNTIME

WRITE_VERBS = {"job.replay", "job.cancel", "job.retry", "event.publish"}


def caller(*scopes: str) -> Caller:
    return Caller(ApiToken("t", "secret", normalise(scopes)))


def names(runtime, who: Caller) -> set[str]:
    return {tool.name for tool in catalogue(runtime).visible(who)}


@pytest.fixture
def loaded(config_dir, runtime):
    return RUNTIME.get()


def test_a_jobs_reader_sees_the_read_verbs_only(loaded):
    seen = names(loaded, caller("jobs:ro"))
    assert seen == {"job.inspect", "job.logs", "job.wait", "system.status"}


def test_a_plugin_scope_shows_that_plugins_commands_and_no_other(loaded):
    seen = names(loaded, caller("echo:rw"))
    assert {"plugin.echo.poll", "plugin.echo.handle", "plugin.echo.health"} == seen
    # A read scope shows the plugin's read commands only.
    assert names(loaded, caller("echo:ro")) == {"plugin.echo.health"}


def test_plugin_rw_adds_every_command_and_the_pipelines_and_jobs_rw_the_operators_verbs(config_dir, runtime):
    config_dir.extra["pipelines"] = [{"name": "p", "on": "p.start", "steps": [{"uses": "echo"}]}]
    from tests.support.runtime import load_runtime

    loaded = load_runtime(config_dir).get()
    seen = names(loaded, caller("plugin:rw"))
    assert {"plugin.echo.poll", "plugin.stress.poll", "pipeline.p", "pipelines.dry_run"} <= seen
    assert not WRITE_VERBS & seen
    assert {"job.replay", "job.cancel", "job.retry"} <= names(loaded, caller("jobs:rw"))
    assert "event.publish" in names(loaded, caller("events:rw"))


def test_the_local_user_without_a_token_and_a_star_token_see_everything(loaded):
    everything = set(catalogue(loaded).tools)
    assert names(loaded, Caller(None)) == everything == names(loaded, caller("*"))
    assert everything >= VERB_NAMES


def test_a_plugin_commands_tool_carries_its_manifest(loaded):
    tools = catalogue(loaded).tools
    poll, health = tools["plugin.echo.poll"].as_mcp(), tools["plugin.echo.health"].as_mcp()
    assert poll["inputSchema"] == {"type": "object", "properties": {"message": {"type": "string"}}}
    assert poll["annotations"]["readOnlyHint"] is False and poll["annotations"]["destructiveHint"] is True
    assert health["annotations"]["readOnlyHint"] is True and health["annotations"]["destructiveHint"] is False
    assert "Emits one echo.poll event" in poll["description"]
    for tool in tools.values():  # every schema is one a client can validate with
        Draft202012Validator.check_schema(tool.input_schema)
        assert tool.input_schema["type"] == "object"


def test_what_plugins_wrote_is_shown_only_to_a_results_reader():
    row = {"job_id": "j", "result": {"x": 1}, "last_error": "boom", "stderr": "e"}
    assert caller("jobs:status:ro").shaped(row) == {"job_id": "j"}
    assert caller("jobs:ro").shaped(row) == row
    assert Caller(None).shaped(row) == row


def test_the_catalogue_is_built_once_per_runtime_and_anew_after_a_reload(config_dir, loaded):
    first = catalogue(loaded)
    assert catalogue(loaded) is first
    config_dir.plugins["echo"]["enabled"] = False
    from tests.support.runtime import load_runtime

    reloaded = load_runtime(config_dir).get()
    assert "plugin.echo.poll" not in catalogue(reloaded).tools
    assert catalogue(reloaded).fingerprint != first.fingerprint
