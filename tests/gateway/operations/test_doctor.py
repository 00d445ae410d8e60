"""`system doctor`: a config that loads but cannot work as meant (Operator Handbook "system
doctor"; issue 6's list). Each case builds a real config directory with real plugin roots."""

from __future__ import annotations

import pytest

from gateway.operations.doctor import ERROR, INFO, WARNING, diagnose
from gateway.runtime import build_runtime
from tests.support.config_dirs import ConfigDir
from tests.support.processes import ductile_json


def findings(config_dir: ConfigDir) -> dict[str, list[tuple[str, str]]]:
    config_dir.write()
    out: dict[str, list[tuple[str, str]]] = {}
    for f in diagnose(build_runtime(config_dir.path)):
        out.setdefault(f.check, []).append((f.severity, f.message))
    return out


def test_an_enabled_plugin_not_discovered_and_a_missing_required_key_are_errors(config_dir):
    config_dir.plugins["ghost"] = {"config": {}}
    config_dir.plugins["sleeper"] = {"uses": "ghost", "enabled": False}  # disabled: not reported
    config_dir.plugins["shell"] = {"uses": "sys_exec", "config": {}}  # `command` is required
    found = findings(config_dir)
    ((severity, message),) = found["plugin_not_discovered"]
    assert severity == ERROR and "'ghost'" in message and "no plugin named 'ghost'" in message
    ((severity, message),) = found["required_config_missing"]
    assert severity == ERROR and "'shell'" in message and "missing required config keys command" in message
    assert "sleeper" not in str(found)


def test_a_plugin_config_its_schema_refuses_is_named_at_its_key(config_dir, tmp_path):
    config_dir.plugins["folder_watch"] = {"config": {"watches": [{"id": "w", "root": str(tmp_path)}]}}
    config_dir.write()
    (finding,) = [f for f in diagnose(build_runtime(config_dir.path)) if f.check == "plugin_config_invalid"]
    assert finding.severity == ERROR and finding.key == "plugins.folder_watch.config.watches[0].event_type"
    assert finding.message == "plugin 'folder_watch' is enabled but cannot run: missing required key 'event_type'"
    assert finding.where and finding.where.startswith(f"{config_dir.path / 'config.yaml'}:")
    assert "plugin_not_discovered" not in {f.check for f in diagnose(build_runtime(config_dir.path))}


def test_alias_chains_and_cycles_are_named(config_dir):
    config_dir.plugins["loud"] = {"uses": "echo", "config": {"message": "x"}}
    config_dir.plugins["louder"] = {"uses": "loud", "config": {}}
    config_dir.plugins["a"] = {"uses": "b", "config": {}}
    config_dir.plugins["b"] = {"uses": "a", "config": {}}
    messages = [m for _, m in findings(config_dir)["alias_cycle"]]
    assert any("alias 'louder' uses the alias 'loud' (louder -> loud -> echo)" in m for m in messages)
    assert any("alias cycle: a -> b -> a" in m for m in messages)


def test_routes_that_loop_are_reported_once_per_cycle(config_dir):
    config_dir.routes = [
        {"from": "echo", "event_type": "echo.poll", "to": "py-greet"},
        {"from": "py-greet", "event_type": "greet.done", "to": "echo"},
        {"from": "echo", "event_type": "other", "to": "stress"},
    ]
    ((severity, message),) = findings(config_dir)["route_cycle"]
    assert severity == WARNING and "echo -> py-greet -> echo" in message


def test_a_scope_naming_an_unknown_plugin_and_a_refused_token_are_reported(config_dir):
    config_dir.extra = {
        "api": {"auth": {"tokens": [{"name": "ops", "token": "t", "scopes": ["jobs:ro", "ghost:rw", "echo:ro"]}]}}
    }
    found = findings(config_dir)
    messages = [m for _, m in found["scope_unknown_plugin"]]
    assert any("'ghost:rw'" in m for m in messages) and any("'ghost:ro'" in m for m in messages)
    assert not any("echo" in m or "jobs" in m for m in messages)


def test_unused_plugins_discovered_or_never_triggered_are_information(config_dir):
    config_dir.plugins = {"echo": {"config": {}, "schedules": [{"every": "5m"}]}, "py-greet": {"config": {}}}
    found = findings(config_dir)
    assert (INFO, "plugin 'stress' is discovered but not configured (add it under plugins:)") in found["unused_plugin"]
    assert [m for _, m in found["untriggered_plugin"]] == [
        "plugin 'py-greet' has no schedule, route, pipeline step or webhook: only API and CLI calls run it"
    ]


def test_a_webhook_listener_on_the_api_port_is_an_error(config_dir):
    config_dir.extra = {"api": {"listen": "127.0.0.1:8099"}, "webhooks": {"listen": "0.0.0.0:8099"}}
    ((severity, message),) = findings(config_dir)["webhook_listen_conflict"]
    assert severity == ERROR and "share port 8099" in message


@pytest.mark.process
@pytest.mark.parametrize("broken", [False, True])
def test_the_cli_exits_1_on_errors_and_0_when_only_warnings_remain(config_dir, broken):
    if broken:
        config_dir.plugins["ghost"] = {"config": {}}
    config_dir.write()
    code, body = ductile_json(config_dir, "system", "doctor")
    assert code == (1 if broken else 0)
    assert body["healthy"] is (not broken)
    assert any(f["check"] == "plugin_not_discovered" for f in body["findings"]) is broken
    assert all(set(f) == {"check", "severity", "message", "where"} for f in body["findings"])


def test_a_relay_peer_allowed_an_event_no_pipeline_takes_is_warned(config_dir):
    config_dir.extra["tokens"] = [{"name": "peer", "key": "k"}]
    config_dir.extra["remote_ingress"] = {
        "peers": [
            {"name": "off", "secret_ref": "peer", "enabled": False, "accept": ["nothing.here"]},
            {"name": "home-primary", "secret_ref": "peer", "accept": ["backup.ready", "report.generated"]},
        ]
    }
    config_dir.extra["pipelines"] = [{"name": "take", "on": "backup.ready", "steps": [{"uses": "echo"}]}]
    config_dir.write()
    found = [f for f in diagnose(build_runtime(config_dir.path)) if f.check.startswith("relay_")]
    assert [(f.check, f.severity, f.key) for f in found] == [
        ("relay_accept_unrouted", WARNING, "remote_ingress.peers[1].accept")
    ]
    assert "relay peer 'home-primary' may send 'report.generated', but no pipeline has on: report.generated" in (
        found[0].message
    )
    config_dir.extra["remote_ingress"] = {"peers": []}
    assert [f.check for f in diagnose(build_runtime(config_dir.write())) if f.check.startswith("relay_")] == [
        "relay_no_peers"
    ]


def test_a_tick_under_a_second_is_a_warning_at_its_key(config_dir):
    config_dir.service["tick_interval"] = "500ms"
    config_dir.write()
    (finding,) = [f for f in diagnose(build_runtime(config_dir.path)) if f.check == "tick_interval_short"]
    assert finding.severity == WARNING and finding.key == "service.tick_interval"
    assert finding.message.startswith("tick_interval 500ms is below the recommended 1s")
    config_dir.service["tick_interval"] = "1s"
    assert "tick_interval_short" not in findings(config_dir)


def test_an_alias_whose_target_is_in_no_root_is_named_at_its_uses(config_dir):
    config_dir.plugins["loud"] = {"uses": "shouter", "config": {}}
    config_dir.write()
    (finding,) = [f for f in diagnose(build_runtime(config_dir.path)) if f.check == "alias_target_missing"]
    assert finding.severity == ERROR and finding.key == "plugins.loud.uses"
    assert "alias 'loud' is enabled but cannot run: it uses 'shouter', which is not a plugin" in finding.message
    assert "plugin_not_discovered" not in {f.check for f in diagnose(build_runtime(config_dir.path))}


def test_hook_pipelines_of_notifying_plugins_that_run_each_other_are_a_cycle(config_dir):
    config_dir.plugins["echo"]["notify_on_complete"] = True
    config_dir.plugins["probe"]["notify_on_complete"] = True
    config_dir.extra = {
        "pipelines": [
            {"name": "after-echo", "on-hook": "job.completed", "from_plugin": "echo", "steps": [{"uses": "probe"}]},
            {"name": "after-probe", "on-hook": "job.completed", "from_plugin": "probe", "steps": [{"uses": "echo"}]},
        ]
    }
    ((severity, message),) = findings(config_dir)["hook_cycle"]
    assert severity == WARNING and "(echo -> probe -> echo)" in message and "hook_max_depth (4)" in message
    config_dir.plugins["probe"]["notify_on_complete"] = False  # probe's completion fires no hook: no loop
    assert "hook_cycle" not in findings(config_dir)


def test_a_command_scope_naming_a_command_the_plugin_lacks(config_dir):
    scopes = ["echo:allow:poll", "echo:allow:sync", "echo:deny:nuke", "echo:allow:*"]
    config_dir.extra = {"api": {"auth": {"tokens": [{"name": "ops", "token": "t", "scopes": scopes}]}}}
    found = findings(config_dir)["scope_unknown_command"]
    assert [(s, m.split(",")[0]) for s, m in found] == [
        (ERROR, "token 'ops' has scope 'echo:allow:sync'"),
        (WARNING, "token 'ops' has scope 'echo:deny:nuke'"),
    ]
    assert "plugin 'echo' has no command 'sync' (it has: poll" in found[0][1] and found[1][1].endswith(
        "(deny is a no-op)"
    )


def test_a_scope_no_check_can_grant_by_is_named(config_dir):
    scopes = ["jobs:stauts:ro", "jobs:status:ro", "jobs:ro", "echo:rw", "echo:allow:poll", "jobs", "*"]
    config_dir.extra = {"api": {"auth": {"tokens": [{"name": "ops", "token": "t", "scopes": scopes}]}}}
    found = findings(config_dir)["scope_unrecognised"]
    assert [(s, m.split(",")[0]) for s, m in found] == [
        (WARNING, "token 'ops' has scope 'jobs'"),
        (WARNING, "token 'ops' has scope 'jobs:stauts:ro'"),
    ]
    assert "grants nothing" in found[0][1] and "jobs:result:ro" in found[0][1]
