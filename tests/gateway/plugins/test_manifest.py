"""Plugin manifests, discovery over plugin roots, and the registry of configured instances.

Spec 000 "5.4 Manifest" (validation), "5.5 Trust & Execution", "The Manifest (`manifest.yaml`)"
(§3.1 top-level fields, §3.2 commands, §3.3 fact_outputs), "Stopwatch" (`stopwatch.max_subs`),
"Configuration Specification" §4.1 (plugin_roots discovery) and §4.2.1 (concurrency controls),
"8.4 Instance Naming" (`uses:` aliases). No database: real files and real executables only.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config.errors import ConfigProblem
from gateway.config.model import GatewayConfig, load_gateway_config
from gateway.plugins.discovery import Discovery, discover_plugins
from gateway.plugins.manifest import Manifest, ManifestInvalid, load_manifest
from gateway.plugins.registry import Registry, build_registry
from ledger.caps import Cap
from tests.support.checkout import REPO

BUNDLED = REPO / "plugins"
DROP = object()  # a manifest key to leave out

# -- helpers ---------------------------------------------------------------------------------


def manifest_doc(name: str = "demo", **fields: Any) -> dict[str, Any]:
    """A valid manifest; `fields` override or (with DROP) remove top-level keys."""
    doc: dict[str, Any] = {
        "manifest_spec": "ductile.plugin",
        "manifest_version": 1,
        "name": name,
        "version": "0.1.0",
        "protocol": 2,
        "entrypoint": "run.sh",
        "description": "A test plugin.",
        "commands": [{"name": "poll", "type": "read"}, {"name": "handle", "type": "write"}],
    }
    doc.update(fields)
    return {k: v for k, v in doc.items() if v is not DROP}


def make_plugin(
    root: Path,
    directory: str,
    doc: dict[str, Any] | str,
    *,
    entrypoint: str | None = "run.sh",
    mode: int = 0o755,
) -> Path:
    """A plugin directory with `manifest.yaml` and an executable entrypoint."""
    plugin = root / directory
    plugin.mkdir(parents=True)
    plugin.chmod(0o755)
    text = doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False)
    (plugin / "manifest.yaml").write_text(textwrap.dedent(text), encoding="utf-8")
    if entrypoint:
        script = plugin / entrypoint
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text('#!/bin/sh\necho \'{"status": "ok", "result": "ok"}\'\n', encoding="utf-8")
        script.chmod(mode)
    return plugin


def load(plugin: Path, root: Path | None = None) -> tuple[Manifest, list[ConfigProblem]]:
    warnings: list[ConfigProblem] = []
    manifest = load_manifest(plugin, root or plugin.parent, warnings)
    return manifest, warnings


def refusal(plugin: Path, root: Path | None = None) -> list[ConfigProblem]:
    with pytest.raises(ManifestInvalid) as caught:
        load(plugin, root)
    assert caught.value.problems, "a refusal must say why"
    return caught.value.problems


def refusal_keys(plugin: Path, root: Path | None = None) -> list[str | None]:
    return [p.key for p in refusal(plugin, root)]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "plugins"
    path.mkdir()
    return path


# -- a valid manifest ------------------------------------------------------------------------


def test_minimal_manifest_loads_typed(root: Path) -> None:
    plugin = make_plugin(root, "demo", manifest_doc())
    manifest, warnings = load(plugin, root)
    assert warnings == []
    assert manifest.name == "demo"
    assert manifest.version == "0.1.0"
    assert manifest.protocol == 2
    assert manifest.entrypoint == (plugin / "run.sh").resolve()
    assert manifest.directory == plugin
    assert manifest.root == root
    assert manifest.file == plugin / "manifest.yaml"
    assert manifest.description == "A test plugin."
    assert manifest.concurrency_safe is True
    assert list(manifest.commands) == ["poll", "handle"]
    assert manifest.commands["poll"].type == "read"
    assert manifest.commands["handle"].type == "write"
    assert manifest.fact_outputs == ()
    assert manifest.required_config == ()
    assert manifest.optional_config == ()
    assert manifest.max_subs == 32
    assert len(manifest.fingerprint) == 64


def test_fingerprint_changes_with_the_manifest(root: Path) -> None:
    one, _ = load(make_plugin(root, "one", manifest_doc("one")), root)
    two, _ = load(make_plugin(root, "two", manifest_doc("two")), root)
    again, _ = load(one.directory, root)
    assert one.fingerprint != two.fingerprint
    assert one.fingerprint == again.fingerprint


def test_command_type_defaults_to_write_when_absent(root: Path) -> None:
    """5.4: write is the paranoid default."""
    plugin = make_plugin(root, "demo", manifest_doc(commands=[{"name": "sync"}, {"name": "poll", "type": "read"}]))
    manifest, _ = load(plugin, root)
    assert manifest.commands["sync"].type == "write"
    assert manifest.commands["poll"].type == "read"


def test_command_details_are_kept(root: Path) -> None:
    command = {
        "name": "poll",
        "type": "read",
        "description": "Fetch.",
        "idempotent": True,
        "retry_safe": False,
        "input_schema": {"url": "string"},
        "output_schema": {"status": "string"},
        "values": {"consume": ["payload.url"], "emit": [{"event": "demo.fetched", "values": ["payload.text"]}]},
    }
    manifest, _ = load(make_plugin(root, "demo", manifest_doc(commands=[command])), root)
    poll = manifest.commands["poll"]
    assert poll.description == "Fetch."
    assert poll.idempotent is True
    assert poll.retry_safe is False
    assert poll.input_schema == {"url": "string"}
    assert poll.output_schema == {"status": "string"}
    assert poll.values is not None
    assert poll.values["emit"][0]["event"] == "demo.fetched"


def test_manifest_objects_are_immutable(root: Path) -> None:
    manifest, _ = load(make_plugin(root, "demo", manifest_doc()), root)
    with pytest.raises(AttributeError):
        manifest.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        manifest.commands["new"] = manifest.commands["poll"]  # type: ignore[index]


@pytest.mark.parametrize(("value", "expected"), [(True, True), (False, False), (DROP, True)])
def test_concurrency_safe_defaults_to_true(root: Path, value: object, expected: bool) -> None:
    manifest, _ = load(make_plugin(root, "demo", manifest_doc(concurrency_safe=value)), root)
    assert manifest.concurrency_safe is expected


def test_config_keys_are_read(root: Path) -> None:
    doc = manifest_doc(config_keys={"required": ["client_id", "client_secret"], "optional": ["access_token"]})
    manifest, _ = load(make_plugin(root, "demo", doc), root)
    assert manifest.required_config == ("client_id", "client_secret")
    assert manifest.optional_config == ("access_token",)


def test_numeric_version_is_kept_as_text(root: Path) -> None:
    manifest, _ = load(make_plugin(root, "demo", manifest_doc(version=2)), root)
    assert manifest.version == "2"


# -- the spec's and the original project's manifests ---------------------------------------------


SPEC_OBJECT_FORMAT = """\
manifest_spec: ductile.plugin
manifest_version: 1
name: withings
version: 1.0.0
protocol: 2
entrypoint: run.py
description: "Fetch health data from Withings API"
commands:
  poll:
    type: read
    description: "Fetch latest measurements from Withings API"
  sync:
    type: write
    description: "Push weight data to Withings API"
  oauth_callback:
    type: write
    description: "Handle OAuth2 callback and store tokens"
  health:
    type: read
    description: "Health check"
config_keys:
  required: [client_id, client_secret]
  optional: [access_token]
"""


def test_spec_object_format_with_commands_as_a_mapping_loads(root: Path) -> None:
    """5.4 "Object format", verbatim."""
    plugin = make_plugin(root, "withings", SPEC_OBJECT_FORMAT, entrypoint="run.py")
    manifest, warnings = load(plugin, root)
    assert warnings == []
    assert manifest.name == "withings"
    assert manifest.version == "1.0.0"
    assert {name: c.type for name, c in manifest.commands.items()} == {
        "poll": "read",
        "sync": "write",
        "oauth_callback": "write",
        "health": "read",
    }
    assert manifest.commands["sync"].name == "sync"
    assert manifest.commands["poll"].description == "Fetch latest measurements from Withings API"
    assert manifest.required_config == ("client_id", "client_secret")


def test_mapping_format_command_type_defaults_to_write(root: Path) -> None:
    manifest, _ = load(make_plugin(root, "demo", manifest_doc(commands={"sync": {"description": "d"}})), root)
    assert manifest.commands["sync"].type == "write"


def test_mapping_format_key_is_the_command_name(root: Path) -> None:
    doc = manifest_doc(commands={"poll": {"type": "read", "name": "fetch"}})
    manifest, _ = load(make_plugin(root, "demo", doc), root)
    assert list(manifest.commands) == ["poll"]
    assert manifest.commands["poll"].name == "poll"


def test_yaml_1_1_yes_and_no_are_booleans_where_the_manifest_wants_one(root: Path) -> None:
    text = yaml.safe_dump(manifest_doc(), sort_keys=False).replace("commands:\n", "concurrency_safe: no\ncommands:\n")
    text = text.replace("  type: read\n", "  type: read\n  idempotent: yes\n")
    manifest, warnings = load(make_plugin(root, "demo", text), root)
    assert warnings == []
    assert manifest.concurrency_safe is False
    assert manifest.commands["poll"].idempotent is True


# The original project's py-greet manifest (mattjoyce/ductile plugins/py-greet), in its shape:
# list commands with full JSON Schemas for output, values, fact_outputs and config_keys.
ORIGINAL_PY_GREET = """\
# py-greet — canonical Python exemplar for ductile plugin authors.
manifest_spec: ductile.plugin
manifest_version: 1
name: py-greet
version: 0.2.0
protocol: 2

# entrypoint is resolved relative to the plugin directory.
entrypoint: run.py

concurrency_safe: true

description: "Canonical Python plugin exemplar for ductile (protocol v2)."

commands:
  - name: poll
    type: write
    description: "Build a greeting from config.greeting + config.name and return it as the result."
    idempotent: false   # last_run changes every invocation
    retry_safe: true    # re-running just overwrites the snapshot — no harm
    input_schema: {}    # poll takes no payload (scheduler-driven)
    output_schema:
      type: object
      properties:
        status:
          type: string
          enum: [ok, error]
        result:
          type: string
        events:
          type: array
          items:
            type: object
        state_updates:
          type: object
          properties:
            last_run:
              type: string
            last_greeting:
              type: string
          required: [last_run, last_greeting]
          additionalProperties: false
        logs:
          type: array
          items:
            type: object
      required: [status, logs]
      additionalProperties: false
    values:
      consume: []
      emit: []

  - name: health
    type: read
    description: "Liveness probe. Returns ok unconditionally."
    idempotent: true
    retry_safe: true
    input_schema: {}
    output_schema:
      type: object
      properties:
        status:
          type: string
          enum: [ok]
      required: [status, logs]
      additionalProperties: false
    values:
      consume: []
      emit: []

fact_outputs:
  - when:
      command: poll          # only the poll command writes state
    from: state_updates       # snapshot the state_updates object
    fact_type: py-greet.snapshot
    compatibility_view: mirror_object   # plugin_state shows the latest snapshot

config_keys:
  required: []
  optional:
    - greeting
    - name
"""


def test_original_py_greet_manifest_loads_without_warnings(root: Path) -> None:
    plugin = make_plugin(root, "py-greet", ORIGINAL_PY_GREET, entrypoint="run.py")
    manifest, warnings = load(plugin, root)
    assert warnings == []
    assert manifest.name == "py-greet"
    assert manifest.commands["poll"].type == "write"
    rule = manifest.fact_rule("poll")
    assert rule is not None
    assert (rule.command, rule.source, rule.fact_type, rule.compatibility_view) == (
        "poll",
        "state_updates",
        "py-greet.snapshot",
        "mirror_object",
    )
    assert manifest.fact_rule("health") is None
    assert manifest.optional_config == ("greeting", "name")
    assert manifest.commands["poll"].output_schema is not None
    assert manifest.commands["poll"].output_schema["required"] == ("status", "logs")


def test_spec_minimal_plugin_example_loads(root: Path) -> None:
    """ "The Manifest" §4.1: notify_echo, with values.emit and only optional config keys."""
    text = """\
    manifest_spec: ductile.plugin
    manifest_version: 1
    name: notify_echo
    version: 0.1.0
    protocol: 2
    entrypoint: run.sh
    description: "Emits an echo event when polled. Stateless."
    concurrency_safe: true
    commands:
      - name: poll
        type: read
        description: "Emits one notify_echo.tick event."
        idempotent: true
        retry_safe: true
        values:
          consume: []
          emit:
            - event: notify_echo.tick
              values:
                - payload.message
                - payload.emitted_at
      - name: health
        type: read
        description: "Reports plugin reachability."
        idempotent: true
        retry_safe: true
    config_keys:
      optional: [message]
    """
    manifest, warnings = load(make_plugin(root, "notify_echo", text), root)
    assert warnings == []
    assert manifest.optional_config == ("message",)


def test_fact_outputs_compatibility_view_defaults_to_mirror_object(root: Path) -> None:
    doc = manifest_doc(fact_outputs=[{"when": {"command": "poll"}, "from": "state_updates", "fact_type": "demo.snap"}])
    manifest, _ = load(make_plugin(root, "demo", doc), root)
    rule = manifest.fact_rule("poll")
    assert rule is not None and rule.compatibility_view == "mirror_object"


def test_several_fact_outputs_rules(root: Path) -> None:
    doc = manifest_doc(
        commands=[{"name": "poll", "type": "read"}, {"name": "token_refresh", "type": "write"}],
        fact_outputs=[
            {"when": {"command": "poll"}, "from": "state_updates", "fact_type": "withings.snapshot"},
            {"when": {"command": "token_refresh"}, "from": "state_updates", "fact_type": "withings.tokens"},
        ],
    )
    manifest, _ = load(make_plugin(root, "demo", doc), root)
    assert [r.fact_type for r in manifest.fact_outputs] == ["withings.snapshot", "withings.tokens"]
    rule = manifest.fact_rule("token_refresh")
    assert rule is not None and rule.fact_type == "withings.tokens"


@pytest.mark.parametrize("directory", sorted(p.name for p in BUNDLED.iterdir() if (p / "manifest.yaml").is_file()))
def test_bundled_manifest_loads_without_warnings(directory: str) -> None:
    manifest, warnings = load(BUNDLED / directory, BUNDLED)
    assert [str(w) for w in warnings] == []
    # `_template` is never discovered; its copies load under the manifest's name, `template`.
    assert manifest.name == directory.removeprefix("_")
    assert manifest.entrypoint.is_file()


def test_bundled_plugins_are_all_discovered_cleanly() -> None:
    found = discover_plugins((BUNDLED,))
    assert set(found.manifests) >= {"echo", "py-greet", "stress", "sys_exec"}
    assert found.invalid == {}
    assert [str(w) for w in found.warnings] == []
    assert found.manifests["sys_exec"].concurrency_safe is False
    assert found.manifests["sys_exec"].required_config == ("command",)


# -- refusals: validation as the spec says ----------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "key", "says"),
    [
        ({"manifest_spec": "ductile.event"}, "manifest_spec", "ductile.plugin"),
        ({"manifest_spec": DROP}, "manifest_spec", "required"),
        ({"manifest_version": 2}, "manifest_version", "1"),
        ({"manifest_version": "1"}, "manifest_version", "1"),
        ({"manifest_version": DROP}, "manifest_version", "required"),
        ({"protocol": 1}, "protocol", "not supported"),
        ({"protocol": 3}, "protocol", "not supported"),
        ({"protocol": "two"}, "protocol", "integer"),
        ({"protocol": DROP}, "protocol", "required"),
        ({"entrypoint": DROP}, "entrypoint", "required"),
        ({"entrypoint": ""}, "entrypoint", "''"),
        ({"name": DROP}, "name", "required"),
        ({"name": "has space"}, "name", "does not match"),
        ({"version": DROP}, "version", "required"),
        ({"commands": DROP}, "commands", "required"),
        ({"commands": []}, "commands", "commands"),
        ({"commands": {}}, "commands", "commands"),
        ({"commands": "poll"}, "commands", "commands"),
        ({"commands": [{"type": "read"}]}, "commands[0].name", "required"),
        ({"commands": [{"name": "poll", "type": "execute"}]}, "commands[0].type", "'read'"),
        ({"commands": {"poll": {"type": "readonly"}}}, "commands.poll.type", "'read'"),
        ({"commands": [{"name": "poll", "idempotent": "sure"}]}, "commands[0].idempotent", "boolean"),
        ({"stopwatch": {"max_subs": 257}}, "stopwatch.max_subs", "256"),
        ({"stopwatch": {"max_subs": -1}}, "stopwatch.max_subs", "minimum"),
        ({"stopwatch": {"max_subs": "many"}}, "stopwatch.max_subs", "integer"),
        ({"config_keys": {"required": "client_id"}}, "config_keys.required", "array"),
        ({"concurrency_safe": "yes please"}, "concurrency_safe", "boolean"),
    ],
)
def test_invalid_manifest_is_refused_naming_file_and_key(
    root: Path, fields: dict[str, Any], key: str, says: str
) -> None:
    plugin = make_plugin(root, "demo", manifest_doc(**fields))
    problems = refusal(plugin, root)
    assert key in [p.key for p in problems], [str(p) for p in problems]
    problem = next(p for p in problems if p.key == key)
    assert problem.file == plugin / "manifest.yaml"
    assert says in problem.message


@pytest.mark.parametrize(
    ("commands", "key", "says"),
    [
        ([{"name": "bad command!", "type": "read"}], "commands[0].name", "a command name: a letter"),
        ([{"name": "9lives", "type": "read"}], "commands[0].name", "got '9lives'"),
        ({"poll": {"type": "read"}, "bad command!": {"type": "read"}}, "commands.bad command!", "a command name"),
        (
            [{"name": "poll", "type": "read", "values": {"consume": ["config.x"]}}],
            "commands[0].values.consume[0]",
            "payload.<name>",
        ),
        (
            [{"name": "poll", "type": "read", "values": {"consume": ["payload.a b"]}}],
            "commands[0].values.consume[0]",
            "got 'payload.a b'",
        ),
        (
            [{"name": "poll", "type": "read", "values": {"emit": [{"event": "e", "values": ["context.x"]}]}}],
            "commands[0].values.emit[0].values[0]",
            "payload.<name>",
        ),
    ],
)
def test_command_names_and_value_paths_are_the_originals(root: Path, commands: Any, key: str, says: str) -> None:
    """The original refuses a command name that is not a letter then letters, digits, '_' or '-',
    and a consumed or emitted value that is not `payload.<name>` or `payload.*`."""
    plugin = make_plugin(root, "demo", manifest_doc(commands=commands))
    problems = refusal(plugin, root)
    assert key in [p.key for p in problems], [str(p) for p in problems]
    problem = next(p for p in problems if p.key == key)
    assert problem.file == plugin / "manifest.yaml" and problem.line and says in problem.message


def test_value_paths_the_original_accepts_load(root: Path) -> None:
    values = {"consume": ["payload.*", "payload.a.b-c_d"], "emit": [{"event": "e", "values": ["payload.x1"]}]}
    manifest, _ = load(make_plugin(root, "demo", manifest_doc(commands=[{"name": "do-it_2", "values": values}])))
    assert list(manifest.commands) == ["do-it_2"]


def test_refusal_names_the_line(root: Path) -> None:
    text = """\
    manifest_spec: ductile.plugin
    manifest_version: 1
    name: demo
    version: 0.1.0
    protocol: 2
    entrypoint: run.sh
    commands:
      - name: poll
        type: execute
    """
    problems = refusal(make_plugin(root, "demo", text), root)
    assert [(p.key, p.line) for p in problems] == [("commands[0].type", 9)]


def test_every_reason_is_reported_not_just_the_first(root: Path) -> None:
    doc = manifest_doc(manifest_spec="other", manifest_version=3, commands=[{"name": "poll", "type": "x"}])
    keys = set(refusal_keys(make_plugin(root, "demo", doc), root))
    assert keys == {"manifest_spec", "manifest_version", "commands[0].type"}


def test_protocol_and_trust_problems_are_reported_together(root: Path) -> None:
    doc = manifest_doc(protocol=1, entrypoint="../run.sh")
    keys = set(refusal_keys(make_plugin(root, "demo", doc), root))
    assert keys == {"protocol", "entrypoint"}


def test_fact_outputs_must_name_a_declared_command(root: Path) -> None:
    doc = manifest_doc(fact_outputs=[{"when": {"command": "sync"}, "from": "state_updates", "fact_type": "demo.s"}])
    problems = refusal(make_plugin(root, "demo", doc), root)
    assert [p.key for p in problems] == ["fact_outputs[0].when.command"]
    assert "'sync'" in problems[0].message


@pytest.mark.parametrize(
    ("rule", "key"),
    [
        ({"when": {"command": "poll"}, "from": "events", "fact_type": "demo.s"}, "fact_outputs[0].from"),
        ({"when": {"command": "poll"}, "from": "state_updates"}, "fact_outputs[0].fact_type"),
        ({"from": "state_updates", "fact_type": "demo.s"}, "fact_outputs[0].when"),
        (
            {"when": {"command": "poll"}, "from": "state_updates", "fact_type": "d.s", "compatibility_view": "reduce"},
            "fact_outputs[0].compatibility_view",
        ),
    ],
)
def test_malformed_fact_outputs_rule_is_refused(root: Path, rule: dict[str, Any], key: str) -> None:
    assert key in refusal_keys(make_plugin(root, "demo", manifest_doc(fact_outputs=[rule])), root)


def test_manifest_that_is_not_a_mapping_is_refused(root: Path) -> None:
    problems = refusal(make_plugin(root, "demo", "- a\n- list\n"), root)
    assert "mapping" in problems[0].message


def test_manifest_with_invalid_yaml_is_refused_with_its_line(root: Path) -> None:
    problems = refusal(make_plugin(root, "demo", "name: demo\ncommands: [unclosed\n"), root)
    assert "invalid YAML" in problems[0].message
    assert problems[0].file == root / "demo" / "manifest.yaml"


# -- stopwatch.max_subs -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stopwatch", "expected"),
    [
        (DROP, 32),
        ({}, 32),
        ({"max_subs": 0}, 32),
        ({"max_subs": 1}, 1),
        ({"max_subs": 64}, 64),
        ({"max_subs": 256}, 256),
    ],
)
def test_stopwatch_max_subs_defaults_to_32_and_allows_1_to_256(root: Path, stopwatch: object, expected: int) -> None:
    manifest, _ = load(make_plugin(root, "demo", manifest_doc(stopwatch=stopwatch)), root)
    assert manifest.max_subs == expected


# -- trust & execution (5.5) -------------------------------------------------------------------


@pytest.mark.parametrize("entrypoint", ["../run.sh", "bin/../run.sh", "./../demo/run.sh"])
def test_entrypoint_with_dot_dot_is_refused(root: Path, entrypoint: str) -> None:
    plugin = make_plugin(root, "demo", manifest_doc(entrypoint=entrypoint))
    problems = refusal(plugin, root)
    assert [p.key for p in problems] == ["entrypoint"]
    assert "'..'" in problems[0].message


def test_absolute_entrypoint_is_refused(root: Path) -> None:
    plugin = make_plugin(root, "demo", manifest_doc(entrypoint="/bin/sh"))
    assert refusal_keys(plugin, root) == ["entrypoint"]


def test_entrypoint_in_a_subdirectory_is_allowed(root: Path) -> None:
    plugin = make_plugin(root, "demo", manifest_doc(entrypoint="./bin/dispatcher"), entrypoint="bin/dispatcher")
    manifest, _ = load(plugin, root)
    assert manifest.entrypoint == (plugin / "bin" / "dispatcher").resolve()


def test_entrypoint_that_is_not_executable_is_refused(root: Path) -> None:
    plugin = make_plugin(root, "demo", manifest_doc(), mode=0o644)
    problems = refusal(plugin, root)
    assert [p.key for p in problems] == ["entrypoint"]
    assert "executable" in problems[0].message
    assert problems[0].line == 6


def test_missing_entrypoint_file_is_refused(root: Path) -> None:
    plugin = make_plugin(root, "demo", manifest_doc(), entrypoint=None)
    problems = refusal(plugin, root)
    assert [p.key for p in problems] == ["entrypoint"]
    assert "does not exist" in problems[0].message


def test_entrypoint_that_is_a_directory_is_refused(root: Path) -> None:
    plugin = make_plugin(root, "demo", manifest_doc(entrypoint="bin"), entrypoint=None)
    (plugin / "bin").mkdir()
    assert refusal_keys(plugin, root) == ["entrypoint"]


def test_entrypoint_symlink_pointing_outside_the_root_is_refused(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.sh"
    outside.write_text("#!/bin/sh\necho '{}'\n")
    outside.chmod(0o755)
    plugin = make_plugin(root, "demo", manifest_doc(), entrypoint=None)
    (plugin / "run.sh").symlink_to(outside)
    problems = refusal(plugin, root)
    assert [p.key for p in problems] == ["entrypoint"]
    assert "outside plugin root" in problems[0].message


def test_entrypoint_symlink_inside_the_root_is_allowed(root: Path) -> None:
    shared = make_plugin(root, "_lib", "{}\n", entrypoint="common.sh")
    plugin = make_plugin(root, "demo", manifest_doc(), entrypoint=None)
    (plugin / "run.sh").symlink_to(shared / "common.sh")
    manifest, _ = load(plugin, root)
    assert manifest.entrypoint == (shared / "common.sh").resolve()


def test_world_writable_plugin_directory_is_refused(root: Path) -> None:
    plugin = make_plugin(root, "demo", manifest_doc())
    plugin.chmod(0o777)
    problems = refusal(plugin, root)
    assert len(problems) == 1
    assert "world-writable" in problems[0].message
    assert problems[0].file == plugin / "manifest.yaml"


def test_group_writable_plugin_directory_is_allowed(root: Path) -> None:
    plugin = make_plugin(root, "demo", manifest_doc())
    plugin.chmod(0o775)
    assert load(plugin, root)[0].name == "demo"


# -- tolerance ---------------------------------------------------------------------------------


def test_unknown_manifest_keys_are_warnings_not_refusals(root: Path) -> None:
    doc = manifest_doc(
        author="someone",
        commands=[{"name": "poll", "type": "read", "timeout_hint": "5s"}],
        config_keys={"required": [], "optional": [], "secret": ["token"]},
        stopwatch={"max_subs": 8, "unit": "ns"},
    )
    plugin = make_plugin(root, "demo", doc)
    manifest, warnings = load(plugin, root)
    assert manifest.max_subs == 8
    assert sorted(w.key or "" for w in warnings) == [
        "author",
        "commands[0].timeout_hint",
        "config_keys.secret",
        "stopwatch.unit",
    ]
    assert all(w.file == plugin / "manifest.yaml" for w in warnings)
    assert any("'author'" in w.message for w in warnings)


def test_unknown_keys_in_mapping_format_commands_are_warnings(root: Path) -> None:
    plugin = make_plugin(root, "demo", manifest_doc(commands={"poll": {"type": "read", "colour": "blue"}}))
    _, warnings = load(plugin, root)
    assert [w.key for w in warnings] == ["commands.poll.colour"]


def test_hyphenated_names_and_custom_command_names_are_fine(root: Path) -> None:
    doc = manifest_doc(
        "google-calendar",
        commands=[{"name": "token_refresh", "type": "write"}, {"name": "list-events", "type": "read"}],
    )
    manifest, warnings = load(make_plugin(root, "google-calendar", doc), root)
    assert warnings == []
    assert manifest.name == "google-calendar"
    assert list(manifest.commands) == ["token_refresh", "list-events"]


def test_placeholder_event_names_in_values_emit_are_fine(root: Path) -> None:
    command = {"name": "poll", "type": "read", "values": {"emit": [{"event": "{payload.event_type}", "values": None}]}}
    manifest, warnings = load(make_plugin(root, "demo", manifest_doc(commands=[command])), root)
    assert warnings == []
    values = manifest.commands["poll"].values
    assert values is not None and values["emit"][0]["event"] == "{payload.event_type}"


def test_manifest_name_need_not_match_its_directory(root: Path) -> None:
    manifest, _ = load(make_plugin(root, "greet-v2", manifest_doc("greet")), root)
    assert manifest.name == "greet"


# -- discovery over plugin_roots ---------------------------------------------------------------


def discover(*roots: Path, allow_symlinks: bool = False) -> Discovery:
    return discover_plugins(tuple(roots), allow_symlinks=allow_symlinks)


def test_discovery_finds_every_plugin_in_every_root(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    make_plugin(first, "one", manifest_doc("one"))
    make_plugin(second, "two", manifest_doc("two"))
    found = discover(first, second)
    assert set(found.manifests) == {"one", "two"}
    assert found.manifests["two"].root == second
    assert found.warnings == []


def test_first_plugin_with_a_name_wins_and_later_duplicates_are_warned(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    make_plugin(first, "echo", manifest_doc("echo", version="1.0.0"))
    later = make_plugin(second, "echo", manifest_doc("echo", version="2.0.0"))
    found = discover(first, second)
    assert found.manifests["echo"].version == "1.0.0"
    assert found.manifests["echo"].directory == first / "echo"
    assert len(found.warnings) == 1
    assert str(later) in found.warnings[0].message
    assert "'echo'" in found.warnings[0].message


def test_root_order_decides_which_duplicate_wins(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    make_plugin(first, "echo", manifest_doc("echo", version="1.0.0"))
    make_plugin(second, "echo", manifest_doc("echo", version="2.0.0"))
    assert discover(second, first).manifests["echo"].version == "2.0.0"


def test_duplicate_names_in_one_root_keep_the_first_directory_alphabetically(root: Path) -> None:
    make_plugin(root, "b-copy", manifest_doc("echo", version="2.0.0"))
    make_plugin(root, "a-orig", manifest_doc("echo", version="1.0.0"))
    found = discover(root)
    assert found.manifests["echo"].version == "1.0.0"
    assert len(found.warnings) == 1


def test_underscore_and_dot_directories_are_ignored(root: Path) -> None:
    make_plugin(root, "_lib", manifest_doc("lib"))
    make_plugin(root, "_template", manifest_doc("template"))
    make_plugin(root, ".hidden", manifest_doc("hidden"))
    make_plugin(root, "real", manifest_doc("real"))
    found = discover(root)
    assert set(found.manifests) == {"real"}
    assert found.invalid == {}
    assert found.warnings == []


def test_directories_and_files_without_a_manifest_are_ignored(root: Path) -> None:
    (root / "lib").mkdir()
    (root / "lib" / "helpers.py").write_text("")
    (root / "README.md").write_text("plugins")
    make_plugin(root, "real", manifest_doc("real"))
    found = discover(root)
    assert set(found.manifests) == {"real"}
    assert found.warnings == []


def test_invalid_plugin_is_skipped_with_a_warning_and_never_stops_the_others(root: Path) -> None:
    make_plugin(root, "a-good", manifest_doc("a-good"))
    bad = make_plugin(root, "b-bad", manifest_doc("b-bad", protocol=1))
    make_plugin(root, "c-good", manifest_doc("c-good"))
    found = discover(root)
    assert set(found.manifests) == {"a-good", "c-good"}
    assert set(found.invalid) == {bad}
    assert [p.key for p in found.invalid[bad]] == ["protocol"]
    messages = [str(w) for w in found.warnings]
    assert len(messages) == 1
    assert str(bad) in messages[0]
    assert "protocol 1 is not supported" in messages[0]


def test_unreadable_manifest_is_skipped(root: Path) -> None:
    plugin = make_plugin(root, "bad", "name: [\n")
    make_plugin(root, "good", manifest_doc("good"))
    found = discover(root)
    assert set(found.manifests) == {"good"}
    assert plugin in found.invalid


def test_root_that_is_a_file_is_unusable(tmp_path: Path, root: Path) -> None:
    (tmp_path / "file-root").write_text("")
    make_plugin(root, "real", manifest_doc("real"))
    found = discover(tmp_path / "file-root", root)
    assert set(found.manifests) == {"real"}
    assert found.unusable_roots == {tmp_path / "file-root": f"plugin root {tmp_path / 'file-root'} is not a directory"}


def test_missing_root_is_unusable(tmp_path: Path, root: Path) -> None:
    """The loader's caller refuses the config for it (tests/gateway/config/test_config_refusals.py)."""
    make_plugin(root, "real", manifest_doc("real"))
    found = discover(tmp_path / "nowhere", root)
    assert set(found.manifests) == {"real"}
    assert found.unusable_roots == {tmp_path / "nowhere": f"plugin root {tmp_path / 'nowhere'} does not exist"}


def test_symlinked_plugin_directory_is_refused_by_default(root: Path, tmp_path: Path) -> None:
    target = make_plugin(root, "_real", manifest_doc("linked"))
    (root / "linked").symlink_to(target)
    found = discover(root)
    assert found.manifests == {}
    assert root / "linked" in found.invalid
    assert any("symlink" in w.message for w in found.warnings)


def test_symlinked_plugin_directory_inside_the_root_loads_with_allow_symlinks(root: Path) -> None:
    target = make_plugin(root, "_real", manifest_doc("linked"))
    (root / "linked").symlink_to(target)
    found = discover(root, allow_symlinks=True)
    assert set(found.manifests) == {"linked"}
    assert any("symlink" in w.message for w in found.warnings), "symlinks are always warned"


def test_symlinked_plugin_directory_outside_the_root_is_refused_even_with_allow_symlinks(
    root: Path, tmp_path: Path
) -> None:
    target = make_plugin(tmp_path / "elsewhere", "real", manifest_doc("linked"))
    (root / "linked").symlink_to(target)
    found = discover(root, allow_symlinks=True)
    assert found.manifests == {}
    problems = found.invalid[root / "linked"]
    assert any("outside plugin root" in p.message for p in problems)


# -- the registry: configured instances joined with manifests -------------------------------------


def registry_for(tmp_path: Path, root: Path, plugins_yaml: str, service: str = "max_workers: 4") -> Registry:
    config_dir = tmp_path / "config"
    config_dir.mkdir(exist_ok=True)
    (config_dir / "config.yaml").write_text(
        f"service:\n  {service}\nplugin_roots: [{root}]\ninclude: [plugins.yaml]\n", encoding="utf-8"
    )
    (config_dir / "plugins.yaml").write_text(textwrap.dedent(plugins_yaml), encoding="utf-8")
    config: GatewayConfig = load_gateway_config(config_dir, {})
    return build_registry(config, discover_plugins(config.plugin_roots))


@pytest.fixture
def stocked_root(root: Path) -> Path:
    make_plugin(root, "echo", manifest_doc("echo", config_keys={"optional": ["message"]}))
    make_plugin(root, "if", manifest_doc("if", config_keys={"required": ["field"], "optional": ["checks"]}))
    make_plugin(root, "sys_exec", manifest_doc("sys_exec", concurrency_safe=False))
    make_plugin(root, "withings", SPEC_OBJECT_FORMAT, entrypoint="run.py")
    return root


def test_configured_plugins_become_instances(tmp_path: Path, stocked_root: Path) -> None:
    registry = registry_for(tmp_path, stocked_root, "plugins:\n  echo:\n    config: {message: hi}\n")
    assert set(registry.instances) == {"echo"}
    echo = registry.instances["echo"]
    assert echo.manifest.name == "echo"
    assert echo.config.config == {"message": "hi"}
    assert echo.command("poll") is not None
    assert echo.command("nope") is None
    assert registry.skipped == {}
    assert registry.warnings == ()


def test_discovered_but_unconfigured_plugins_are_not_instances(tmp_path: Path, stocked_root: Path) -> None:
    registry = registry_for(tmp_path, stocked_root, "plugins: {}\n")
    assert registry.instances == {}
    assert "withings" in registry.discovery.manifests


def test_aliases_use_a_plugin_with_their_own_config_and_parallelism(tmp_path: Path, stocked_root: Path) -> None:
    registry = registry_for(
        tmp_path,
        stocked_root,
        """
        plugins:
          check_youtube:
            uses: if
            parallelism: 2
            config: {field: text, checks: [{contains: youtu.be, emit: youtube.url.detected}]}
          check_web:
            uses: if
            config: {field: url}
        """,
    )
    youtube, web = registry.instances["check_youtube"], registry.instances["check_web"]
    assert youtube.manifest is web.manifest
    assert youtube.manifest.name == "if"
    assert youtube.config.config["field"] == "text"
    assert web.config.config["field"] == "url"
    assert (youtube.parallelism, youtube.node_parallelism) == (2, 2)
    # No `parallelism`: no cap across nodes; each node runs up to its max_workers.
    assert (web.parallelism, web.node_parallelism) == (None, 4)
    assert registry.parallelism_caps() == {"check_youtube": Cap(2, 2), "check_web": Cap(None, 4)}


def test_disabled_plugin_goes_to_disabled_not_instances(tmp_path: Path, stocked_root: Path) -> None:
    registry = registry_for(tmp_path, stocked_root, "plugins:\n  echo: {enabled: false}\n  sys_exec: {}\n")
    assert set(registry.instances) == {"sys_exec"}
    assert set(registry.disabled) == {"echo"}
    assert "echo" not in registry.parallelism_caps()
    assert registry.skipped == {}


def test_disabled_plugin_missing_required_config_is_disabled_not_skipped(tmp_path: Path, stocked_root: Path) -> None:
    registry = registry_for(tmp_path, stocked_root, "plugins:\n  if: {enabled: false}\n")
    assert set(registry.disabled) == {"if"}
    assert registry.skipped == {}
    assert registry.warnings == ()


@pytest.mark.parametrize(
    ("plugins_yaml", "expected"),
    [
        ("plugins:\n  echo: {parallelism: 3}\n", Cap(3, 3)),
        ("plugins:\n  echo: {}\n", Cap(None, 4)),
        ("plugins:\n  sys_exec: {}\n", Cap(1, 1)),
        ("plugins:\n  sys_exec: {parallelism: 2}\n", Cap(2, 2)),
        ("plugins:\n  echo: {node_parallelism: 2}\n", Cap(None, 2)),
        ("plugins:\n  echo: {parallelism: 3, node_parallelism: 1}\n", Cap(3, 1)),
    ],
)
def test_effective_parallelism(tmp_path: Path, stocked_root: Path, plugins_yaml: str, expected: Cap) -> None:
    """§4.2.1 on each node: the operator's parallelism, else 1 for concurrency_safe: false, else
    max_workers (4 here); across nodes only the operator's cap, or 1 for a plugin not
    concurrency-safe (issue 38)."""
    registry = registry_for(tmp_path, stocked_root, plugins_yaml)
    (instance,) = registry.instances.values()
    assert instance.cap == expected


def test_missing_required_config_keys_skip_the_instance_with_a_reason(tmp_path: Path, stocked_root: Path) -> None:
    registry = registry_for(
        tmp_path,
        stocked_root,
        "plugins:\n  withings:\n    config: {client_id: abc}\n  if:\n    config: {checks: []}\n  echo: {}\n",
    )
    assert set(registry.instances) == {"echo"}
    assert set(registry.skipped) == {"withings", "if"}
    assert "client_secret" in registry.skipped["withings"]
    assert "client_id" not in registry.skipped["withings"]
    assert "field" in registry.skipped["if"]
    warned = {w.key: str(w) for w in registry.warnings}
    assert "client_secret" in warned["plugins.withings"]


def test_unknown_operator_config_keys_are_warnings_not_refusals(tmp_path: Path, stocked_root: Path) -> None:
    registry = registry_for(tmp_path, stocked_root, "plugins:\n  echo:\n    config: {message: hi, colour: blue}\n")
    assert set(registry.instances) == {"echo"}
    (warning,) = registry.warnings
    assert warning.key == "plugins.echo.config.colour"
    assert "'colour'" in warning.message
    assert warning.file == tmp_path / "config" / "plugins.yaml"


def test_plugin_without_declared_config_keys_accepts_any_config(tmp_path: Path, root: Path) -> None:
    make_plugin(root, "free", manifest_doc("free"))
    registry = registry_for(tmp_path, root, "plugins:\n  free:\n    config: {anything: 1}\n")
    assert set(registry.instances) == {"free"}
    assert registry.warnings == ()


def test_a_config_schema_refuses_a_bad_config_at_its_line_and_warns_about_unknown_keys(
    tmp_path: Path, root: Path
) -> None:
    schema = {
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/item"}}},
        "$defs": {"item": {"type": "object", "x-warn-unknown": True, "properties": {"n": {"type": "integer"}}}},
    }
    make_plugin(root, "typed", manifest_doc("typed", config_schema=schema))
    registry = registry_for(
        tmp_path,
        root,
        """
        plugins:
          good:
            uses: typed
            config:
              items: [{n: 1, extra: 2}]
          bad:
            uses: typed
            config:
              items:
                - n: 1
                - n: two
        """,
    )
    assert set(registry.instances) == {"good"} and set(registry.skipped) == {"bad"}
    (problem,) = registry.refusals["bad"]
    plugins_yaml = tmp_path / "config" / "plugins.yaml"
    assert (problem.file, problem.line, problem.key) == (plugins_yaml, 12, "plugins.bad.config.items[1].n")
    assert "'two' is not of type 'integer'" in problem.message
    assert f"{plugins_yaml}:12 key plugins.bad.config.items[1].n" in registry.skipped["bad"]
    unknown = [w for w in registry.warnings if w.key == "plugins.good.config.items[0].extra"]
    assert [(w.file, w.line) for w in unknown] == [(plugins_yaml, 6)]


def test_a_config_schema_jsonschema_cannot_apply_skips_its_instances_naming_the_manifest(
    tmp_path: Path, root: Path
) -> None:
    make_plugin(root, "sloppy", manifest_doc("sloppy", config_schema={"type": "text"}))
    make_plugin(root, "fine", manifest_doc("fine"))
    registry = registry_for(tmp_path, root, "plugins:\n  sloppy: {config: {a: 1}}\n  fine: {}\n")
    assert set(registry.instances) == {"fine"}
    (problem,) = registry.refusals["sloppy"]
    assert problem.file == root / "sloppy" / "manifest.yaml" and problem.key == "config_schema"
    assert problem.message.startswith("config_schema cannot be applied: 'text' is not valid")


def test_unknown_plugin_is_skipped_naming_the_roots(tmp_path: Path, stocked_root: Path) -> None:
    registry = registry_for(tmp_path, stocked_root, "plugins:\n  ghost: {}\n  alias: {uses: phantom}\n  echo: {}\n")
    assert set(registry.instances) == {"echo"}
    assert "'ghost'" in registry.skipped["ghost"]
    assert str(stocked_root) in registry.skipped["ghost"]
    assert "'phantom'" in registry.skipped["alias"]


def test_configured_plugin_with_an_invalid_manifest_is_skipped_with_the_manifests_reason(
    tmp_path: Path, root: Path
) -> None:
    make_plugin(root, "broken", manifest_doc("broken", manifest_version=9))
    make_plugin(root, "fine", manifest_doc("fine"))
    registry = registry_for(tmp_path, root, "plugins:\n  broken: {}\n  fine: {}\n")
    assert set(registry.instances) == {"fine"}
    assert "invalid" in registry.skipped["broken"]
    assert "manifest_version" in registry.skipped["broken"]


def test_invalid_manifest_is_found_by_its_declared_name_too(tmp_path: Path, root: Path) -> None:
    make_plugin(root, "broken-dir", manifest_doc("broken", protocol=1))
    registry = registry_for(tmp_path, root, "plugins:\n  broken: {}\n")
    assert "invalid" in registry.skipped["broken"]
    assert "protocol" in registry.skipped["broken"]


def test_registry_maps_are_read_only(tmp_path: Path, stocked_root: Path) -> None:
    registry = registry_for(tmp_path, stocked_root, "plugins:\n  echo: {}\n")
    with pytest.raises(TypeError):
        registry.instances["x"] = registry.instances["echo"]  # type: ignore[index]
    with pytest.raises(TypeError):
        registry.skipped["x"] = "no"  # type: ignore[index]


def test_registry_over_the_bundled_plugins(tmp_path: Path) -> None:
    registry = registry_for(
        tmp_path,
        BUNDLED,
        """
        plugins:
          echo: {config: {message: hi}}
          py-greet: {config: {greeting: Hello, name: Test}}
          stress: {}
          uptime: {uses: sys_exec, config: {command: uptime}}
          sys_exec: {}
        """,
        service="max_workers: 3",
    )
    assert set(registry.instances) == {"echo", "py-greet", "stress", "uptime"}
    assert registry.instances["uptime"].parallelism == 1
    assert registry.instances["echo"].cap == Cap(None, 3)
    assert "command" in registry.skipped["sys_exec"]


def test_a_command_declared_twice_is_refused(tmp_path):
    root = tmp_path / "root"
    plugin = root / "twice"
    plugin.mkdir(parents=True)
    entry = plugin / "run.sh"
    entry.write_text("#!/bin/sh\n")
    entry.chmod(0o755)
    (plugin / "manifest.yaml").write_text(
        "manifest_spec: ductile.plugin\nmanifest_version: 1\nname: twice\nversion: 1\nprotocol: 2\n"
        "entrypoint: run.sh\ncommands:\n  - {name: poll, type: read}\n  - {name: poll, type: write}\n"
    )
    found = discover_plugins((root,))
    assert "twice" not in found.manifests
    assert any("declared twice" in str(p) for p in next(iter(found.invalid.values())))


def test_a_symlinked_entrypoint_inside_the_root_loads_with_a_warning(tmp_path):
    root = tmp_path / "root"
    plugin = root / "linked"
    plugin.mkdir(parents=True)
    real = plugin / "real.sh"
    real.write_text("#!/bin/sh\n")
    real.chmod(0o755)
    (plugin / "run.sh").symlink_to(real)
    (plugin / "manifest.yaml").write_text(
        "manifest_spec: ductile.plugin\nmanifest_version: 1\nname: linked\nversion: 1\nprotocol: 2\n"
        "entrypoint: run.sh\ncommands: [{name: poll, type: read}]\n"
    )
    found = discover_plugins((root,))
    assert "linked" in found.manifests
    assert any("is a symlink" in str(w) for w in found.warnings)
