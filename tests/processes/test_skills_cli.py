"""`ductile skills` (and `system skills`): the capability export for LLMs. Markdown with every
plugin command (endpoint, scopes, expanded input schema, semantic anchors) and every callable
pipeline (trigger, mode, steps); `--json` is exactly what `GET /skills` answers from a real API."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.support.config_dirs import PLUGIN_ROOTS, ConfigDir
from tests.support.live_api import live_api
from tests.support.processes import ductile, ductile_json

WRITER = {
    "manifest_spec": "ductile.plugin",
    "manifest_version": 1,
    "name": "notifier",
    "version": "1.0.0",
    "protocol": 2,
    "entrypoint": "run.sh",
    "description": "Sends notifications.",
    "commands": [
        # No type: write (the paranoid default); no hints: neither idempotent nor retry-safe.
        {"name": "send", "description": "Send one notification.", "input_schema": {"to": "string", "n": "integer"}},
        {
            "name": "lookup",
            "type": "read",
            "idempotent": False,
            "input_schema": {
                "type": "object",
                "properties": {"id": {"type": "string", "minLength": 1}},
                "required": ["id"],
            },
        },
    ],
}


@pytest.fixture
def cfg(tmp_path) -> ConfigDir:
    root = tmp_path / "more-plugins"
    (root / "notifier").mkdir(parents=True)
    (root / "notifier" / "manifest.yaml").write_text(yaml.safe_dump(WRITER))
    entry = root / "notifier" / "run.sh"
    entry.write_text('#!/bin/sh\ncat >/dev/null; printf \'{"status":"ok"}\'\n')
    entry.chmod(0o755)
    config = ConfigDir(tmp_path / "config")
    config.plugins["notifier"] = {"config": {}}
    config.extra["plugin_roots"] = [*PLUGIN_ROOTS, str(root)]
    config.extra["pipelines"] = [
        {
            "name": "notify-flow",
            "on": "notify.start",
            "execution_mode": "synchronous",
            "timeout": "12s",
            "steps": [
                {"id": "fetch", "uses": "notifier.lookup"},
                {"id": "tell", "uses": "notifier.send", "if": {"path": "payload.ok", "op": "eq", "value": True}},
            ],
        },
        {
            "name": "fanout",
            "on": "fan.start",
            "steps": [{"split": [{"id": "x", "uses": "echo"}, {"id": "y", "uses": "probe"}]}],
        },
        {"name": "on-failure", "on-hook": "job.failed", "steps": [{"id": "alert", "uses": "notifier.send"}]},
    ]
    config.write()
    return config


def test_json_lists_every_command_with_its_anchors_and_schema(cfg):
    code, body = ductile_json(cfg, "skills")
    assert code == 0
    skills = {s["name"]: s for s in body["skills"]}
    send = skills["plugin.notifier.send"]
    assert send["endpoint"] == "/plugin/notifier/send" and send["tier"] == "WRITE"
    assert (send["mutates_state"], send["idempotent"], send["retry_safe"]) == (True, False, False)
    assert send["scopes"] == ["plugin:rw", "notifier:rw"]
    # The compact `field: type` form is expanded to JSON Schema, as in /openapi.json.
    assert send["input_schema"] == {
        "type": "object",
        "properties": {"to": {"type": "string"}, "n": {"type": "integer"}},
    }
    lookup = skills["plugin.notifier.lookup"]
    assert (lookup["mutates_state"], lookup["idempotent"], lookup["retry_safe"]) == (False, False, True)
    assert lookup["input_schema"]["required"] == ["id"]  # a full JSON Schema is kept as it is
    assert lookup["description"] == "notifier: lookup"  # none declared
    assert skills["plugin.echo.health"]["input_schema"] is None
    # Every command of every loaded plugin is there.
    code, plugins = ductile_json(cfg, "plugin", "list")
    assert code == 0
    configured = [p for p in plugins["plugins"] if p["state"] != "available"]  # skills: configured plugins
    listed = {f"plugin.{p['name']}.{c}" for p in configured for c in p["commands"]}
    assert listed and listed == {name for name in skills if name.startswith("plugin.")}
    flow = skills["pipeline.notify-flow"]
    assert flow["trigger"] == "notify.start" and flow["execution_mode"] == "synchronous"
    assert flow["timeout_secs"] == 12 and flow["endpoint"] == "/pipeline/notify-flow"
    assert flow["entry_steps"] == ["fetch"]
    assert flow["steps"] == [
        {"id": "fetch", "plugin": "notifier", "command": "lookup", "after": []},
        {
            "id": "tell",
            "plugin": "notifier",
            "command": "send",
            "after": ["fetch"],
            "if": {"path": "payload.ok", "op": "eq", "value": True},
        },
    ]
    fan = skills["pipeline.fanout"]
    assert fan["execution_mode"] == "asynchronous" and sorted(fan["entry_steps"]) == ["x", "y"]
    assert "pipeline.on-failure" not in skills  # hooks are started by signals, not callable


def test_markdown_carries_the_same_facts_for_an_llm(cfg):
    proc = ductile(cfg, "skills")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert text.startswith("# Ductile skills\n")
    send = text.split("### plugin.notifier.send\n", 1)[1].split("\n### ", 1)[0]
    assert "Send one notification." in send
    assert "- endpoint: `POST /plugin/notifier/send`" in send
    assert "- tier: WRITE; scopes: `plugin:rw` or `notifier:rw`" in send
    assert "- mutates_state: yes; idempotent: no; retry_safe: no" in send
    schema = send.split("```json\n", 1)[1].split("\n```", 1)[0]
    assert json.loads(schema) == {"type": "object", "properties": {"to": {"type": "string"}, "n": {"type": "integer"}}}
    flow = text.split("### pipeline.notify-flow\n", 1)[1].split("\n### ", 1)[0]
    assert "- endpoint: `POST /pipeline/notify-flow`; scopes: `plugin:rw`" in flow
    assert "- trigger: `notify.start`" in flow
    assert "- mode: synchronous (waits up to 12 s)" in flow
    assert "  - `fetch`: notifier.lookup\n" in flow
    assert '  - `tell`: notifier.send, after fetch, only if {"path": "payload.ok", "op": "eq", "value": true}' in flow
    assert "on-failure" not in text
    # Every command of every loaded plugin has its section.
    _, plugins = ductile_json(cfg, "plugin", "list")
    for plugin in plugins["plugins"]:
        for command in plugin["commands"] if plugin["state"] != "available" else ():
            assert f"### plugin.{plugin['name']}.{command}\n" in text


def test_system_skills_is_the_same_command(cfg):
    assert ductile(cfg, "system", "skills").stdout == ductile(cfg, "skills").stdout
    assert ductile_json(cfg, "system", "skills") == ductile_json(cfg, "skills")


def test_json_is_what_get_skills_answers_from_a_real_api(cfg):
    _, exported = ductile_json(cfg, "skills")
    with live_api(cfg, [{"name": "admin", "token": "tok-admin", "scopes": ["*"]}]) as live:
        code, served = live.api.call("GET", "/skills", token=None)
    assert code == 200
    assert served == exported


def test_a_broken_config_exits_78_naming_the_problem(cfg):
    (cfg.path / "config.yaml").write_text("plugins: [unclosed\n")
    proc = ductile(cfg, "skills")
    assert proc.returncode == 78
    assert "config.yaml" in proc.stderr
