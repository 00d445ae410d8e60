"""The config loader: `config.yaml`, includes, merging, `${VAR}`s, `.env` files, validation and
the typed, immutable result.

Spec 000 "Ductile: Configuration Specification" §1 (only config.yaml is implicit), §3 (grafting:
merge rules, directory includes), §4 (file formats, defaults, concurrency controls), §6
(environment interpolation, `.env` includes); §5.6 timeouts, §5.7 retry, §5.8 circuit breaker;
"Why this works with ductile" (x- anchors). No database: these tests only touch the filesystem.
"""

from __future__ import annotations

import dataclasses
import os
import textwrap
from collections.abc import Mapping
from pathlib import Path

import pytest

from gateway.config.durations import format_duration, parse_duration
from gateway.config.errors import ConfigError, ConfigProblem
from gateway.config.model import GatewayConfig, load_gateway_config
from tests.support.config_dirs import seal

# -- helpers ---------------------------------------------------------------------------------


def write(directory: Path, name: str, text: str) -> Path:
    """Write `text` (dedented) to `directory/name`, creating parent directories."""
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def line_of(path: Path, needle: str) -> int:
    """1-based number of the first line of `path` containing `needle`."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in {path}")


def load(directory: Path, environ: Mapping[str, str] | None = None) -> GatewayConfig:
    """Seal the directory (the seal's own rules are in test_integrity.py), then load it."""
    seal(directory)
    return load_gateway_config(directory, dict(environ or {}))


def problems_of(directory: Path, environ: Mapping[str, str] | None = None) -> tuple[ConfigProblem, ...]:
    with pytest.raises(ConfigError) as caught:
        load(directory, environ)
    assert caught.value.problems, "a ConfigError must carry at least one problem"
    return caught.value.problems


def only_problem(directory: Path, environ: Mapping[str, str] | None = None) -> ConfigProblem:
    problems = problems_of(directory, environ)
    assert len(problems) == 1, [str(p) for p in problems]
    return problems[0]


def warning_keys(config: GatewayConfig) -> list[str | None]:
    return [w.key for w in config.warnings]


# -- the config directory and defaults -------------------------------------------------------


def test_missing_config_yaml_is_an_error_naming_the_directory(tmp_path: Path) -> None:
    problem = only_problem(tmp_path)
    assert "config.yaml" in problem.message
    assert str(tmp_path) in problem.message


def test_empty_config_yaml_loads_with_the_spec_defaults(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "")
    config = load(tmp_path)
    service = config.service
    assert service.name == "ductile"
    assert service.tick_interval == 60
    assert service.log_level == "info"
    assert service.log_format == "json"
    assert service.dedupe_ttl == 24 * 3600
    assert service.job_queue_retention == 24 * 3600
    assert service.job_log_retention == 30 * 86400
    assert service.job_transitions_retention == service.job_attempts_retention == 30 * 86400
    assert service.breaker_transitions_retention == 90 * 86400
    assert service.max_workers == max(1, (os.cpu_count() or 1) - 1)
    assert service.strict_mode is False
    assert service.allow_symlinks is False
    assert config.plugins == {}
    assert config.routes == ()
    assert config.plugin_roots == ()
    assert config.warnings == ()


def test_state_path_defaults_to_a_database_in_the_config_directory(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "service: {name: x}\n")
    assert load(tmp_path).state_path == tmp_path / "ductile.db"


@pytest.mark.parametrize(("cpus", "expected"), [(8, 7), (2, 1), (1, 1), (None, 1)])
def test_max_workers_defaults_to_cpu_count_minus_one_but_at_least_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cpus: int | None, expected: int
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    write(tmp_path, "config.yaml", "")
    assert load(tmp_path).service.max_workers == expected


def test_explicit_service_settings_are_typed(tmp_path: Path) -> None:
    write(
        tmp_path,
        "config.yaml",
        """
        service:
          name: home-primary
          tick_interval: 5m
          log_level: DEBUG
          log_format: text
          dedupe_ttl: 2h
          job_log_retention: 2w
          job_queue_retention: 1d
          max_workers: 3
          strict_mode: true
          allow_symlinks: true
          plugin_env_passthrough: [PATH, HOME]
        """,
    )
    service = load(tmp_path).service
    assert service.name == "home-primary"
    assert service.tick_interval == 300
    assert service.log_level == "debug"
    assert service.log_format == "text"
    assert service.dedupe_ttl == 7200
    assert service.job_log_retention == 14 * 86400
    assert service.job_queue_retention == 86400
    # Unset, the transitions' and attempts' clocks are job_log_retention's.
    assert service.job_transitions_retention == service.job_attempts_retention == 14 * 86400
    assert service.max_workers == 3
    assert service.strict_mode is True
    assert service.allow_symlinks is True
    assert service.plugin_env_passthrough == ("PATH", "HOME")


def test_the_spec_example_config_yaml_loads(tmp_path: Path) -> None:
    """Spec "Configuration Specification" §4.1, verbatim apart from the plugin roots."""
    write(
        tmp_path,
        "config.yaml",
        """
        service:
          name: ductile
          tick_interval: 60s
          log_level: info
          log_format: json
          dedupe_ttl: 24h
          job_log_retention: 30d
          job_queue_retention: 24h
          # Omit to use the default: max(1, CPU-1). Set to 1 to force global serial dispatch.
          max_workers: 4
          strict_mode: true   # Enforce integrity & configuration checks on startup
        plugin_roots:
          - /opt/ductile/plugins
          - /opt/ductile/plugins-private
        api:
          enabled: true
          listen: 127.0.0.1:8080
        state:
          path: ./data/state.db
        """,
    )
    config = load(tmp_path)
    assert config.service.max_workers == 4
    assert config.plugin_roots == (Path("/opt/ductile/plugins"), Path("/opt/ductile/plugins-private"))
    assert str(config.api.listen) == "127.0.0.1:8080"
    assert config.state_path == tmp_path / "data" / "state.db"
    assert config.warnings == ()


# -- plugin defaults: timeouts, retry, breaker ------------------------------------------------


def plugin_config(tmp_path: Path, body: str):
    plugins = textwrap.indent(textwrap.dedent(body), "  ")
    write(tmp_path, "config.yaml", "service: {max_workers: 4}\nplugins:\n" + plugins)
    return load(tmp_path).plugins


def test_plugin_defaults_follow_the_spec(tmp_path: Path) -> None:
    plugin = plugin_config(tmp_path, "echo: {}\n")["echo"]
    assert plugin.name == "echo"
    assert plugin.uses == "echo"
    assert plugin.enabled is True
    assert plugin.config == {}
    assert plugin.parallelism is None
    assert plugin.retry.max_attempts == 4
    assert plugin.retry.backoff_base == 30
    assert plugin.circuit_breaker.threshold == 3
    assert plugin.circuit_breaker.reset_after == 30 * 60
    assert plugin.max_outstanding_polls == 1
    assert plugin.notify_on_complete is False
    assert plugin.schedules == ()


@pytest.mark.parametrize(
    ("command", "seconds"),
    [("poll", 60), ("handle", 120), ("health", 10), ("init", 30), ("token_refresh", 60), ("sync", 60)],
)
def test_default_timeout_per_command(tmp_path: Path, command: str, seconds: float) -> None:
    plugin = plugin_config(tmp_path, "echo: {}\n")["echo"]
    assert plugin.timeout_for(command) == seconds


def test_plugin_level_timeout_applies_to_every_command(tmp_path: Path) -> None:
    plugin = plugin_config(tmp_path, "slow: {timeout: 15s}\n")["slow"]
    for command in ("poll", "handle", "health", "init", "token_refresh"):
        assert plugin.timeout_for(command) == 15, command


def test_per_command_timeouts_override_only_their_command(tmp_path: Path) -> None:
    plugin = plugin_config(tmp_path, "slow:\n  timeouts: {poll: 300s, handle: 5m, sync: 90s}\n")["slow"]
    assert plugin.timeout_for("poll") == 300
    assert plugin.timeout_for("handle") == 300
    assert plugin.timeout_for("sync") == 90
    assert plugin.timeout_for("health") == 10
    assert plugin.timeout_for("init") == 30
    assert plugin.timeout_for("other") == 60


def test_per_command_timeouts_win_over_the_plugin_level_timeout(tmp_path: Path) -> None:
    plugin = plugin_config(tmp_path, "slow:\n  timeout: 20s\n  timeouts: {poll: 2m}\n")["slow"]
    assert plugin.timeout_for("poll") == 120
    assert plugin.timeout_for("handle") == 20
    assert plugin.timeout_for("custom") == 20


def test_zero_plugin_timeout_is_one_error_on_the_timeout_key(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "plugins:\n  slow:\n    timeout: 0s\n")
    problem = only_problem(tmp_path)
    assert problem.key == "plugins.slow.timeout"
    assert problem.line == 3
    assert "positive" in problem.message


def test_zero_per_command_timeout_is_an_error_on_that_command(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "plugins:\n  slow:\n    timeouts:\n      poll: 0s\n")
    problem = only_problem(tmp_path)
    assert problem.key == "plugins.slow.timeouts.poll"
    assert problem.line == 4


def test_retry_policy_is_configurable_per_plugin(tmp_path: Path) -> None:
    plugin = plugin_config(tmp_path, "withings:\n  retry: {max_attempts: 5, backoff_base: 60s}\n")["withings"]
    assert plugin.retry.max_attempts == 5
    assert plugin.retry.backoff_base == 60


def test_plugin_level_max_attempts_sets_the_retry_attempts(tmp_path: Path) -> None:
    """The cookbook's `max_attempts: 2` directly under the plugin."""
    assert plugin_config(tmp_path, "discord: {max_attempts: 2}\n")["discord"].retry.max_attempts == 2


def test_circuit_breaker_is_configurable_per_plugin(tmp_path: Path) -> None:
    plugin = plugin_config(tmp_path, "withings:\n  circuit_breaker: {threshold: 5, reset_after: 1h}\n")["withings"]
    assert plugin.circuit_breaker.threshold == 5
    assert plugin.circuit_breaker.reset_after == 3600


def test_spec_plugin_definition_example_loads(tmp_path: Path) -> None:
    """Spec "Configuration Specification" §4.2."""
    plugin = plugin_config(
        tmp_path,
        """
        echo:
          enabled: true
          parallelism: 1
          notify_on_complete: true # Opt-in to job.completed lifecycle signals
          schedules: # Optional; omit for event-driven plugins
            - id: default
              every: 5m
          config:
            message: "Hello"
        """,
    )["echo"]
    assert plugin.parallelism == 1
    assert plugin.notify_on_complete is True
    assert [(s.id, s.command, s.every and s.every.seconds) for s in plugin.schedules] == [("default", "poll", 300)]
    assert plugin.config == {"message": "Hello"}


def test_alias_records_the_plugin_it_uses(tmp_path: Path) -> None:
    plugins = plugin_config(tmp_path, "check_youtube:\n  uses: if\n  config: {field: text}\n")
    assert plugins["check_youtube"].uses == "if"
    assert plugins["check_youtube"].config == {"field": "text"}


def test_plugin_names_may_contain_hyphens_and_underscores(tmp_path: Path) -> None:
    plugins = plugin_config(tmp_path, "py-greet: {}\nsys_exec: {}\n")
    assert set(plugins) == {"py-greet", "sys_exec"}


def test_plugin_name_with_a_space_is_refused(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "plugins:\n  bad name: {}\n")
    problem = only_problem(tmp_path)
    assert problem.key == "plugins"
    assert "bad name" in problem.message


# -- parallelism -----------------------------------------------------------------------------


def test_parallelism_up_to_max_workers_is_accepted(tmp_path: Path) -> None:
    assert plugin_config(tmp_path, "echo: {parallelism: 4}\n")["echo"].parallelism == 4


def test_parallelism_above_max_workers_is_an_error(tmp_path: Path) -> None:
    config = write(tmp_path, "config.yaml", "service:\n  max_workers: 2\nplugins:\n  echo:\n    parallelism: 3\n")
    problem = only_problem(tmp_path)
    assert problem.file == config
    assert problem.key == "plugins.echo.parallelism"
    assert problem.line == 5
    assert "max_workers" in problem.message


def test_parallelism_is_checked_against_the_default_max_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    write(tmp_path, "config.yaml", "plugins:\n  echo: {parallelism: 4}\n")
    assert only_problem(tmp_path).key == "plugins.echo.parallelism"


def test_parallelism_may_exceed_one_nodes_workers_when_nodes_share_a_postgresql_ledger(tmp_path: Path) -> None:
    """Issue 38: three nodes of 4 slots could never run more than 4 of a plugin's jobs at once."""
    write(tmp_path, "config.yaml", "service:\n  max_workers: 2\nplugins:\n  echo:\n    parallelism: 6\n")
    config = load(tmp_path, {"DATABASE_URL": "postgresql://ledger.invalid/ductile"})
    assert config.plugins["echo"].parallelism == 6


def test_node_parallelism_above_max_workers_is_an_error_even_on_a_shared_ledger(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "service:\n  max_workers: 2\nplugins:\n  echo:\n    node_parallelism: 3\n")
    problem = only_problem(tmp_path, {"DATABASE_URL": "postgresql://ledger.invalid/ductile"})
    assert (problem.key, problem.line) == ("plugins.echo.node_parallelism", 5)
    assert "a node runs at most max_workers" in problem.message


@pytest.mark.parametrize("value", [0, -1])
def test_parallelism_below_one_is_an_error(tmp_path: Path, value: int) -> None:
    write(tmp_path, "config.yaml", f"plugins:\n  echo:\n    parallelism: {value}\n")
    problem = only_problem(tmp_path)
    assert problem.key == "plugins.echo.parallelism"
    assert problem.line == 3


# -- worker groups ---------------------------------------------------------------------------


def test_worker_groups_name_configured_plugins_and_the_internal_hops(tmp_path: Path) -> None:
    write(
        tmp_path,
        "config.yaml",
        """
        service:
          worker_groups:
            media: [echo, probe]
            flow: [core.switch, core.relay, echo]
        plugins:
          echo: {}
          probe: {}
        """,
    )
    service = load(tmp_path).service
    assert dict(service.worker_groups) == {"media": ("echo", "probe"), "flow": ("core.switch", "core.relay", "echo")}
    assert service.worker_group("media") == ("echo", "probe")
    with pytest.raises(ValueError, match=r"unknown worker group 'gpu' \(configured groups: flow, media\)"):
        service.worker_group("gpu")


def test_a_worker_group_naming_an_unconfigured_plugin_is_refused_at_its_line(tmp_path: Path) -> None:
    """Its workers would wait forever for jobs no config can make."""
    config = write(
        tmp_path,
        "config.yaml",
        """
        service:
          worker_groups:
            media:
              - echo
              - ffmpeg
        plugins:
          echo: {}
        """,
    )
    problem = only_problem(tmp_path)
    assert (problem.file, problem.line, problem.key) == (
        config,
        line_of(config, "ffmpeg"),
        "service.worker_groups.media[1]",
    )
    assert "names 'ffmpeg', which is not a configured plugin (configured: echo;" in problem.message


@pytest.mark.parametrize(
    ("groups", "key", "line", "says"),
    [
        ("media: []", "service.worker_groups.media", 3, "should be non-empty"),
        ("media: echo", "service.worker_groups.media", 3, "is not of type 'array'"),
        ("media: [echo, echo]", "service.worker_groups.media", 3, "non-unique"),
        ('"bad name": [echo]', "service.worker_groups", 2, "'bad name' does not match"),
    ],
)
def test_a_malformed_worker_group_is_refused_by_the_schema(
    tmp_path: Path, groups: str, key: str, line: int, says: str
) -> None:
    write(tmp_path, "config.yaml", f"service:\n  worker_groups:\n    {groups}\nplugins:\n  echo: {{}}\n")
    problem = only_problem(tmp_path)
    assert (problem.key, problem.line) == (key, line) and says in problem.message, problem


def test_max_workers_below_one_is_an_error(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "service:\n  max_workers: 0\n")
    problem = only_problem(tmp_path)
    assert problem.key == "service.max_workers"
    assert "minimum" in problem.message


# -- durations -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("5m", 300),
        ("1h30m", 5400),
        ("24h", 86400),
        ("30d", 30 * 86400),
        ("2w", 14 * 86400),
        ("500ms", 0.5),
        ("1m30s", 90),
        (" 10s ", 10),
        (45, 45),
        (1.5, 1.5),
    ],
)
def test_durations_in_the_spec_notation(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["5 minutes", "1x", "", "s", "-5s", "5m ago", "m5", True, None, -1, [1]])
def test_malformed_durations_are_refused(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (30, "30s"), (5400, "1h30m"), (86400, "1d"), (0.5, "500ms")])
def test_durations_format_back_to_the_spec_notation(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_durations_in_config_accept_weeks_and_days(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "service:\n  dedupe_ttl: 2w\n  job_queue_retention: 30d\n")
    service = load(tmp_path).service
    assert service.dedupe_ttl == 14 * 86400
    assert service.job_queue_retention == 30 * 86400


def test_bad_duration_names_file_line_key_and_the_expected_form(tmp_path: Path) -> None:
    config = write(tmp_path, "config.yaml", "service:\n  name: x\n  tick_interval: soon\n")
    problem = only_problem(tmp_path)
    assert problem.file == config
    assert problem.line == 3
    assert problem.key == "service.tick_interval"
    assert "duration" in problem.message
    assert "30s" in problem.message
    assert "'soon'" in problem.message


def test_bad_plugin_timeout_duration_names_the_plugin_key(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "plugins:\n  slow:\n    timeouts:\n      poll: forever\n")
    problem = only_problem(tmp_path)
    assert problem.key == "plugins.slow.timeouts.poll"
    assert problem.line == 4
    assert "duration" in problem.message


# -- dedupe_ttl and job_queue_retention --------------------------------------------------------


def test_job_queue_retention_shorter_than_dedupe_ttl_is_an_error(tmp_path: Path) -> None:
    config = write(tmp_path, "config.yaml", "service:\n  dedupe_ttl: 48h\n  job_queue_retention: 24h\n")
    problem = only_problem(tmp_path)
    assert problem.file == config
    assert problem.key == "service.job_queue_retention"
    assert problem.line == 3
    assert "dedupe_ttl" in problem.message


def test_longer_dedupe_ttl_with_the_default_retention_is_an_error(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "service:\n  dedupe_ttl: 48h\n")
    assert only_problem(tmp_path).key == "service.job_queue_retention"


def test_job_queue_retention_equal_to_dedupe_ttl_is_fine(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "service:\n  dedupe_ttl: 36h\n  job_queue_retention: 1d12h\n")
    service = load(tmp_path).service
    assert service.dedupe_ttl == service.job_queue_retention == 36 * 3600


# -- includes --------------------------------------------------------------------------------


def test_only_config_yaml_is_loaded_implicitly(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "service: {name: root}\n")
    write(tmp_path, "plugins.yaml", "plugins: {echo: {}}\n")
    config = load(tmp_path)
    assert config.plugins == {}
    assert config.files == (tmp_path / "config.yaml",)


def test_spec_modular_example_grafts_pipelines_into_the_monolith(tmp_path: Path) -> None:
    """Spec "Configuration Specification" §3.2."""
    write(tmp_path, "config.yaml", "include:\n  - pipelines.yaml\nservice:\n  name: my-gateway\n")
    write(tmp_path, "pipelines.yaml", "pipelines:\n  - name: video-wisdom\n    on: discord.link\n")
    config = load(tmp_path)
    assert config.service.name == "my-gateway"
    assert config.pipelines == ({"name": "video-wisdom", "on": "discord.link"},)
    assert "include" not in config.document
    assert config.files == (tmp_path / "config.yaml", tmp_path / "pipelines.yaml")


def test_maps_merge_across_files(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "include: [more.yaml]\nplugins:\n  echo:\n    config: {a: 1, b: 2}\n")
    write(tmp_path, "more.yaml", "plugins:\n  echo:\n    config: {b: 3, c: 4}\n    enabled: false\n  other: {}\n")
    plugins = load(tmp_path).plugins
    assert set(plugins) == {"echo", "other"}
    assert plugins["echo"].config == {"a": 1, "b": 3, "c": 4}
    assert plugins["echo"].enabled is False


def test_arrays_append_in_include_order(tmp_path: Path) -> None:
    write(
        tmp_path,
        "config.yaml",
        """
        include: [one.yaml, two.yaml]
        routes:
          - {from: a, event_type: root.event, to: b}
        plugin_roots: [/p/root]
        """,
    )
    write(tmp_path, "one.yaml", "routes:\n  - {from: a, event_type: one.event, to: b}\nplugin_roots: [/p/one]\n")
    write(tmp_path, "two.yaml", "routes:\n  - {from: a, event_type: two.event, to: b, command: sync}\n")
    config = load(tmp_path)
    assert [r.event_type for r in config.routes] == ["root.event", "one.event", "two.event"]
    assert config.routes[0].command == "handle"
    assert config.routes[2].command == "sync"
    assert config.plugin_roots == (Path("/p/root"), Path("/p/one"))


def test_scalars_later_file_wins(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "include: [a.yaml, b.yaml]\nservice:\n  name: root\n  tick_interval: 10s\n")
    write(tmp_path, "a.yaml", "service:\n  name: from-a\n")
    write(tmp_path, "b.yaml", "service:\n  name: from-b\n")
    service = load(tmp_path).service
    assert service.name == "from-b"
    assert service.tick_interval == 10


def test_directory_include_loads_yaml_files_alphabetically_and_not_recursively(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "include: [conf.d]\n")
    write(tmp_path, "conf.d/20-b.yaml", "service: {name: from-b}\npipelines: [{name: b}]\n")
    write(tmp_path, "conf.d/10-a.yaml", "service: {name: from-a}\npipelines: [{name: a}]\n")
    write(tmp_path, "conf.d/30-c.yml", "service: {name: from-yml}\n")
    write(tmp_path, "conf.d/notes.txt", "service: {name: from-txt}\n")
    write(tmp_path, "conf.d/nested/40-d.yaml", "service: {name: from-nested}\n")
    config = load(tmp_path)
    assert [p["name"] for p in config.pipelines] == ["a", "b"]
    assert config.service.name == "from-b"
    assert config.files == (tmp_path / "config.yaml", tmp_path / "conf.d/10-a.yaml", tmp_path / "conf.d/20-b.yaml")


def test_includes_can_include_further_files(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "include: [a.yaml]\n")
    write(tmp_path, "a.yaml", "include: [b.yaml]\nplugins: {a: {}}\n")
    write(tmp_path, "b.yaml", "plugins: {b: {}}\n")
    assert set(load(tmp_path).plugins) == {"a", "b"}


def test_include_in_a_subdirectory_resolves_against_its_own_file(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "include: [sub/plugins.yaml]\n")
    write(
        tmp_path,
        "sub/plugins.yaml",
        """
        include: [more.yaml]
        plugin_roots: [./plugins, ../shared]
        environment_vars:
          include: [.env]
        state:
          path: data/state.db
        plugins:
          echo:
            config: {token: "${TOKEN}"}
        """,
    )
    write(tmp_path, "sub/more.yaml", "plugins: {more: {}}\n")
    write(tmp_path, "sub/.env", "TOKEN=from-sub-env\n")
    config = load(tmp_path)
    assert set(config.plugins) == {"echo", "more"}
    assert config.plugin_roots == (tmp_path / "sub" / "plugins", tmp_path / "shared")
    assert config.state_path == tmp_path / "sub" / "data" / "state.db"
    assert config.plugins["echo"].config["token"] == "from-sub-env"
    assert config.env_files == (tmp_path / "sub" / ".env",)


def test_missing_include_is_an_error_naming_the_file_that_includes_it(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "include: [plugins.yaml]\n")
    sub = write(tmp_path, "plugins.yaml", "service: {name: x}\ninclude:\n  - nope.yaml\n")
    problem = only_problem(tmp_path)
    assert problem.file == sub
    assert problem.line == 3
    assert problem.key == "include[0]"
    assert "nope.yaml" in problem.message
    assert "does not exist" in problem.message


def test_include_cycle_is_an_error_naming_the_files(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "include: [a.yaml]\n")
    a = write(tmp_path, "a.yaml", "include: [b.yaml]\n")
    b = write(tmp_path, "b.yaml", "include:\n  - a.yaml\n")
    problem = only_problem(tmp_path)
    assert "cycle" in problem.message
    assert problem.file == b
    assert problem.key == "include[0]"
    assert problem.line == 2
    assert str(a) in problem.message and str(b) in problem.message


def test_including_config_yaml_from_an_include_is_a_cycle(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "include: [a.yaml]\n")
    a = write(tmp_path, "a.yaml", "include: [config.yaml]\n")
    problem = only_problem(tmp_path)
    assert "cycle" in problem.message
    assert problem.file == a


def test_a_file_including_itself_is_a_cycle(tmp_path: Path) -> None:
    config = write(tmp_path, "config.yaml", "include: [config.yaml]\n")
    problem = only_problem(tmp_path)
    assert "cycle" in problem.message
    assert problem.file == config


def test_a_file_included_twice_is_read_once_with_a_warning(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "include: [a.yaml, b.yaml]\n")
    write(tmp_path, "a.yaml", "include: [common.yaml]\n")
    b = write(tmp_path, "b.yaml", "include: [common.yaml]\n")
    write(tmp_path, "common.yaml", "routes:\n  - {from: x, event_type: e, to: y}\n")
    config = load(tmp_path)
    assert len(config.routes) == 1
    assert [(w.file, w.key) for w in config.warnings] == [(b, "include[0]")]


@pytest.mark.parametrize("value", ["plugins.yaml", "[1]", "{a: b}"])
def test_include_that_is_not_a_list_of_paths_is_one_clear_error(tmp_path: Path, value: str) -> None:
    config = write(tmp_path, "config.yaml", f"include: {value}\n")
    problem = only_problem(tmp_path)
    assert problem.file == config
    assert problem.key == "include"
    assert "list of paths" in problem.message


def test_errors_in_an_included_file_name_that_file_and_line(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "include: [plugins.yaml]\nservice: {max_workers: 4}\n")
    plugins = write(tmp_path, "plugins.yaml", "plugins:\n  echo:\n    enabled: true\n    parallelism: lots\n")
    problem = only_problem(tmp_path)
    assert problem.file == plugins
    assert problem.line == 4
    assert problem.key == "plugins.echo.parallelism"
    assert "integer" in problem.message


def test_the_line_of_a_key_overridden_by_an_include_is_the_includes(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "include: [late.yaml]\nservice:\n  tick_interval: 10s\n")
    late = write(tmp_path, "late.yaml", "# later\nservice:\n  tick_interval: never\n")
    problem = only_problem(tmp_path)
    assert (problem.file, problem.line, problem.key) == (late, 3, "service.tick_interval")


# -- ${VAR} interpolation and .env files -------------------------------------------------------


def test_variables_are_interpolated_from_the_environment(tmp_path: Path) -> None:
    write(
        tmp_path,
        "config.yaml",
        'service:\n  name: "${NAME}"\nplugins:\n  echo:\n    config:\n      url: "https://${HOST}:${PORT}/x"\n',
    )
    config = load(tmp_path, {"NAME": "gw", "HOST": "example.org", "PORT": "8443"})
    assert config.service.name == "gw"
    assert config.plugins["echo"].config["url"] == "https://example.org:8443/x"


def test_interpolated_values_are_not_interpolated_again(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "plugins:\n  echo:\n    config: {secret: '${A}'}\n")
    config = load(tmp_path, {"A": "${B}"})
    assert config.plugins["echo"].config["secret"] == "${B}"


def test_unquoted_variable_is_typed_like_the_text_it_stands_for(tmp_path: Path) -> None:
    """Spec §6: interpolation happens before YAML parsing, so `max_workers: ${N}` is a number."""
    write(tmp_path, "config.yaml", "service:\n  max_workers: ${N}\n  strict_mode: ${STRICT}\n  name: ${NAME}\n")
    service = load(tmp_path, {"N": "3", "STRICT": "true", "NAME": "gw"}).service
    assert service.max_workers == 3
    assert service.strict_mode is True
    assert service.name == "gw"


def test_quoted_variable_stays_a_string(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", 'plugins:\n  echo:\n    config:\n      label: "${PORT}"\n      port: ${PORT}\n')
    config = load(tmp_path, {"PORT": "8080"}).plugins["echo"].config
    assert config["label"] == "8080"
    assert config["port"] == 8080


def test_unset_variable_names_variable_file_line_and_key(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "include: [plugins.yaml]\n")
    plugins = write(tmp_path, "plugins.yaml", "plugins:\n  withings:\n    config:\n      client_id: ${WITHINGS_ID}\n")
    problem = only_problem(tmp_path)
    assert "WITHINGS_ID" in problem.message
    assert "not set" in problem.message
    assert problem.file == plugins
    assert problem.line == 4
    assert problem.key == "plugins.withings.config.client_id"


def test_every_unset_variable_is_reported_across_files(tmp_path: Path) -> None:
    root = write(tmp_path, "config.yaml", "include: [a.yaml]\nservice:\n  name: ${ONE}\n")
    a = write(tmp_path, "a.yaml", "plugins:\n  x:\n    config: {k: '${TWO}', j: '${THREE}'}\n")
    problems = problems_of(tmp_path)
    found = {(p.file, p.key) for p in problems}
    assert found == {(root, "service.name"), (a, "plugins.x.config.k"), (a, "plugins.x.config.j")}
    for name in ("ONE", "TWO", "THREE"):
        assert any(name in p.message for p in problems), name


def test_malformed_variable_reference_is_an_error(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "service:\n  name: '${not a name}'\n")
    problem = only_problem(tmp_path, {"not a name": "x"})
    assert problem.key == "service.name"
    assert "${not a name}" in problem.message


def test_env_file_supplies_variables(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "environment_vars:\n  include: [.env]\nservice:\n  name: ${NAME}\n")
    write(tmp_path, ".env", "# comment\nNAME=from-dotenv\n")
    config = load(tmp_path)
    assert config.service.name == "from-dotenv"
    assert config.env_files == (tmp_path / ".env",)
    assert "environment_vars" not in config.document


def test_env_file_never_overrides_the_process_environment(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "environment_vars:\n  include: [.env]\nservice:\n  name: ${NAME}\n")
    write(tmp_path, ".env", "NAME=from-dotenv\n")
    assert load(tmp_path, {"NAME": "from-process"}).service.name == "from-process"


def test_later_env_files_win_over_earlier_ones(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "environment_vars:\n  include: [a.env, b.env]\nservice:\n  name: ${NAME}\n")
    write(tmp_path, "a.env", "NAME=a\n")
    write(tmp_path, "b.env", "NAME=b\n")
    assert load(tmp_path).service.name == "b"


def test_missing_env_file_is_an_error_naming_the_declaring_file(tmp_path: Path) -> None:
    config = write(tmp_path, "config.yaml", "environment_vars:\n  include:\n    - secrets.env\n")
    problem = only_problem(tmp_path)
    assert problem.file == config
    assert problem.line == 3
    assert problem.key == "environment_vars.include[0]"
    assert "secrets.env" in problem.message


@pytest.mark.parametrize(
    ("yaml_text", "key", "line"),
    [
        ("include:\n  - ${DIR}/plugins.yaml\n", "include[0]", 2),
        ("plugin_roots:\n  - ${HOME}/plugins\n", "plugin_roots[0]", 2),
        ("state:\n  path: ${STATE}/db\n", "state.path", 2),
        ("environment_vars:\n  include:\n    - ${DIR}/.env\n", "environment_vars.include[0]", 3),
        (
            "service:\n  backup:\n    schedule: '0 3 * * *'\n    directory: ${DIR}/backups\n",
            "service.backup.directory",
            4,
        ),
    ],
)
def test_variables_are_refused_in_paths(tmp_path: Path, yaml_text: str, key: str, line: int) -> None:
    """Spec §6: interpolation is forbidden in file paths, for a static, verifiable tree."""
    config = write(tmp_path, "config.yaml", yaml_text)
    problem = only_problem(tmp_path, {"DIR": str(tmp_path), "HOME": str(tmp_path), "STATE": str(tmp_path)})
    assert problem.file == config
    assert problem.key == key
    assert problem.line == line
    assert "${VAR}" in problem.message


# -- relative paths --------------------------------------------------------------------------


def test_relative_paths_resolve_against_the_config_directory_not_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_dir = tmp_path / "conf"
    write(config_dir, "config.yaml", "plugin_roots: [plugins, ./more, /abs/plugins]\nstate: {path: ./data/state.db}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load(config_dir)
    assert config.plugin_roots == (config_dir / "plugins", config_dir / "more", Path("/abs/plugins"))
    assert config.state_path == config_dir / "data" / "state.db"


def test_home_relative_paths_are_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    write(tmp_path, "config.yaml", "plugin_roots: ['~/plugins']\nstate: {path: '~/ductile.db'}\n")
    config = load(tmp_path)
    assert config.plugin_roots == (tmp_path / "home" / "plugins",)
    assert config.state_path == tmp_path / "home" / "ductile.db"


def test_duplicate_plugin_roots_are_ignored_after_the_first(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "include: [a.yaml]\nplugin_roots: [plugins, /opt/p]\n")
    write(tmp_path, "a.yaml", "plugin_roots: [./plugins, /opt/q, /opt/p]\n")
    assert load(tmp_path).plugin_roots == (tmp_path / "plugins", Path("/opt/p"), Path("/opt/q"))


# -- x- keys and YAML anchors ------------------------------------------------------------------


def test_x_keys_are_ignored_and_anchors_with_merge_keys_work(tmp_path: Path) -> None:
    """Cookbook "Why this works with ductile": anchors live under x- top-level keys."""
    write(
        tmp_path,
        "config.yaml",
        """
        x-discord-config: &discord-config
          webhook_url: "https://discord.com/api/webhooks/123/abc"
          default_username: "Ductile"
        x-discord-test: &discord-test
          uses: discord_notify
          enabled: true
          timeout: 15s
          max_attempts: 2
        plugins:
          discord_test_cron:
            <<: *discord-test
            schedules:
              - cron: "*/5 * * * *"
                command: poll
            config:
              <<: *discord-config
              poll_message: "[T2] cron"
          discord_test_window:
            <<: *discord-test
            enabled: false
            config: *discord-config
        """,
    )
    config = load(tmp_path)
    assert config.warnings == ()
    assert not any(str(k).startswith("x-") for k in config.document)
    cron = config.plugins["discord_test_cron"]
    assert cron.uses == "discord_notify"
    assert cron.timeout_for("poll") == 15
    assert cron.retry.max_attempts == 2
    assert cron.config == {
        "webhook_url": "https://discord.com/api/webhooks/123/abc",
        "default_username": "Ductile",
        "poll_message": "[T2] cron",
    }
    window = config.plugins["discord_test_window"]
    assert window.enabled is False
    assert window.config["default_username"] == "Ductile"


def test_x_keys_in_included_files_are_ignored_too(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "include: [plugins.yaml]\n")
    write(tmp_path, "plugins.yaml", "x-defaults: &d {timeout: 5s}\nplugins:\n  a: *d\n")
    config = load(tmp_path)
    assert config.warnings == ()
    assert config.plugins["a"].timeout_for("handle") == 5


def test_errors_inside_a_merged_anchor_name_the_plugin_key(tmp_path: Path) -> None:
    config = write(
        tmp_path, "config.yaml", "x-base: &base\n  timeout: never\nplugins:\n  a:\n    <<: *base\n    enabled: true\n"
    )
    problem = only_problem(tmp_path)
    assert problem.file == config
    assert problem.key == "plugins.a.timeout"


def test_variables_in_merged_anchors_are_interpolated(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "x-c: &c\n  token: ${TOKEN}\nplugins:\n  a:\n    config:\n      <<: *c\n")
    assert load(tmp_path, {"TOKEN": "t"}).plugins["a"].config == {"token": "t"}


def test_unused_x_block_is_not_interpolated(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "x-unused:\n  token: ${NEVER_SET}\nservice:\n  name: gw\n")
    assert load(tmp_path).service.name == "gw"


# -- YAML as the original reads it -------------------------------------------------------------


def test_yaml_1_1_words_times_and_dates_stay_strings(tmp_path: Path) -> None:
    """`on:` is the pipelines DSL's trigger key; `no`, `07:30` and dates are plugin config values."""
    write(
        tmp_path,
        "config.yaml",
        """
        pipelines:
          - name: notify-on-build
            on: build.complete
        plugins:
          echo:
            config: {answer: no, at: 07:30, since: 2024-01-01, mode: off, count: 0420, ratio: 1e3}
        """,
    )
    config = load(tmp_path)
    assert config.pipelines[0]["on"] == "build.complete"
    assert dict(config.plugins["echo"].config) == {
        "answer": "no",
        "at": "07:30",
        "since": "2024-01-01",
        "mode": "off",
        "count": 420,
        "ratio": 1000.0,
    }


def test_yes_and_no_are_accepted_for_boolean_settings(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "service:\n  strict_mode: yes\nplugins:\n  echo:\n    enabled: no\n")
    config = load(tmp_path)
    assert config.service.strict_mode is True
    assert config.plugins["echo"].enabled is False


# -- unknown keys are warned, not refused --------------------------------------------------------


def test_unknown_keys_are_warned_by_name_and_the_config_still_loads(tmp_path: Path) -> None:
    config_file = write(
        tmp_path,
        "config.yaml",
        """
        secrets:
          vault_file: vault.age
        service:
          name: x
          shiny_new_option: 1
        plugins:
          echo:
            frobnicate: true
            config: {anything: goes}
        routes:
          - {from: a, event_type: e, to: b, priority: 1}
        """,
    )
    config = load(tmp_path)
    assert set(warning_keys(config)) == {
        "secrets",
        "service.shiny_new_option",
        "plugins.echo.frobnicate",
        "routes[0].priority",
    }
    by_key = {w.key: w for w in config.warnings}
    assert by_key["secrets"].file == config_file
    assert by_key["secrets"].line == 1
    assert "'frobnicate'" in by_key["plugins.echo.frobnicate"].message
    assert by_key["plugins.echo.frobnicate"].line == 8
    assert config.plugins["echo"].config == {"anything": "goes"}


def test_the_original_projects_example_config_loads_with_warnings_only(tmp_path: Path) -> None:
    """The shape of mattjoyce/ductile's config/config.yaml (with a `secrets:` block we do not know)."""
    write(
        tmp_path,
        "config.yaml",
        """
        service:
          name: ductile
          tick_interval: 60s
          log_level: info
          strict_mode: true
        state:
          path: "./ductile.db"
        secrets:
          age_key_file: "age.key"
          vault_file: "vault.age"
        plugin_roots:
          - "./plugins"
        webhooks:
          listen: "127.0.0.1:8091"
        include:
          - api.yaml
          - plugins.yaml
        """,
    )
    write(tmp_path, "api.yaml", "api:\n  enabled: true\n  listen: 127.0.0.1:8080\n")
    write(tmp_path, "plugins.yaml", "plugins:\n  echo:\n    enabled: true\n    schedules:\n      - every: 5m\n")
    config = load(tmp_path)
    assert warning_keys(config) == ["secrets"]
    assert str(config.webhooks.listen) == "127.0.0.1:8091" and config.webhooks.endpoints == ()
    assert [(s.id, s.every and s.every.text) for s in config.plugins["echo"].schedules] == [("default", "5m")]


# -- validation: file, key, line, expectation; never half-loaded ---------------------------------


@pytest.mark.parametrize(
    ("yaml_text", "key", "line", "expected"),
    [
        ("service:\n  max_workers: four\n", "service.max_workers", 2, "integer"),
        ("service:\n  log_format: xml\n", "service.log_format", 2, "json"),
        ("service:\n  strict_mode: sometimes\n", "service.strict_mode", 2, "boolean"),
        ("plugins:\n  echo:\n    enabled: 'yes please'\n", "plugins.echo.enabled", 3, "boolean"),
        ("plugins:\n  echo:\n    config: [1, 2]\n", "plugins.echo.config", 3, "object"),
        ("plugins:\n  echo:\n    retry:\n      max_attempts: 0\n", "plugins.echo.retry.max_attempts", 4, "minimum"),
        ("plugins: [echo]\n", "plugins", 1, "object"),
        ("routes:\n  - from: a\n    event_type: e\n", "routes[0].to", 2, "'to'"),
        ("plugin_roots: /opt/plugins\n", "plugin_roots", 1, "list of paths"),
    ],
)
def test_schema_errors_name_file_key_line_and_expectation(
    tmp_path: Path, yaml_text: str, key: str, line: int, expected: str
) -> None:
    config = write(tmp_path, "config.yaml", yaml_text)
    problem = only_problem(tmp_path)
    assert problem.file == config
    assert problem.key == key
    assert problem.line == line
    assert expected in problem.message
    assert str(config) in str(problem) and key in str(problem)


def test_invalid_yaml_names_file_and_line(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "include: [bad.yaml]\n")
    bad = write(tmp_path, "bad.yaml", "service:\n  name: x\n  tick_interval: [unclosed\n")
    problem = only_problem(tmp_path)
    assert problem.file == bad
    assert "invalid YAML" in problem.message
    assert problem.line is not None and problem.line >= 3


def test_a_file_that_is_not_a_mapping_is_an_error(tmp_path: Path) -> None:
    config = write(tmp_path, "config.yaml", "- just\n- a list\n")
    problem = only_problem(tmp_path)
    assert problem.file == config
    assert "mapping" in problem.message


def test_several_schema_problems_are_all_reported(tmp_path: Path) -> None:
    write(
        tmp_path,
        "config.yaml",
        "service:\n  max_workers: many\n  tick_interval: often\nplugins:\n  echo:\n    enabled: maybe\n",
    )
    keys = {p.key for p in problems_of(tmp_path)}
    assert keys == {"service.max_workers", "service.tick_interval", "plugins.echo.enabled"}


def test_several_semantic_problems_are_all_reported(tmp_path: Path) -> None:
    write(
        tmp_path,
        "config.yaml",
        "service:\n  max_workers: 2\n  dedupe_ttl: 2d\nplugins:\n  a: {parallelism: 3}\n  b: {parallelism: 9}\n",
    )
    keys = {p.key for p in problems_of(tmp_path)}
    assert keys == {"service.job_queue_retention", "plugins.a.parallelism", "plugins.b.parallelism"}


def test_schema_and_semantic_problems_are_reported_together(tmp_path: Path) -> None:
    write(
        tmp_path,
        "config.yaml",
        "service:\n  max_workers: 2\n  tick_interval: often\nplugins:\n  a: {parallelism: 3}\n",
    )
    keys = {p.key for p in problems_of(tmp_path)}
    assert keys == {"service.tick_interval", "plugins.a.parallelism"}


def test_include_and_variable_problems_are_reported_together(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "include: [missing.yaml]\nservice:\n  name: ${UNSET}\n")
    keys = {p.key for p in problems_of(tmp_path)}
    assert keys == {"include[0]", "service.name"}


def test_config_error_exits_with_ex_config(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "service: {max_workers: 0}\n")
    with pytest.raises(ConfigError) as caught:
        load(tmp_path)
    assert caught.value.exit_code == 78
    assert "service.max_workers" in str(caught.value)


def test_problem_renders_file_line_key_and_message() -> None:
    problem = ConfigProblem("expected an integer", file=Path("/c/config.yaml"), line=3, key="service.max_workers")
    assert str(problem) == "/c/config.yaml:3 key service.max_workers: expected an integer"
    assert problem.as_dict() == {
        "file": "/c/config.yaml",
        "line": 3,
        "key": "service.max_workers",
        "message": "expected an integer",
    }


# -- immutability ----------------------------------------------------------------------------


@pytest.fixture
def loaded(tmp_path: Path) -> GatewayConfig:
    write(
        tmp_path,
        "config.yaml",
        """
        service: {max_workers: 2}
        plugins:
          echo:
            config:
              message: hi
              nested: {a: 1}
              items: [1, 2]
        pipelines:
          - name: p
        """,
    )
    return load(tmp_path)


def test_config_fields_cannot_be_assigned(loaded: GatewayConfig) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        loaded.service = loaded.service  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        loaded.service.max_workers = 99  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        loaded.plugins["echo"].enabled = False  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        loaded.plugins["echo"].retry.max_attempts = 9  # type: ignore[misc]


def test_plugin_map_and_plugin_config_cannot_be_mutated(loaded: GatewayConfig) -> None:
    echo = loaded.plugins["echo"]
    with pytest.raises(TypeError):
        loaded.plugins["other"] = echo  # type: ignore[index]
    with pytest.raises(TypeError):
        echo.config["message"] = "changed"  # type: ignore[index]
    with pytest.raises(TypeError):
        echo.config["nested"]["a"] = 2
    with pytest.raises(AttributeError):
        echo.config["items"].append(3)
    with pytest.raises(TypeError):
        echo.timeouts["poll"] = 1.0  # type: ignore[index]
    assert echo.config["message"] == "hi"


def test_document_pipelines_and_routes_cannot_be_mutated(loaded: GatewayConfig) -> None:
    with pytest.raises(TypeError):
        loaded.document["service"] = {}  # type: ignore[index]
    with pytest.raises(TypeError):
        loaded.pipelines[0]["name"] = "q"  # type: ignore[index]
    assert isinstance(loaded.pipelines, tuple)
    assert isinstance(loaded.routes, tuple)
    assert isinstance(loaded.plugin_roots, tuple)


def test_an_include_whose_plugins_are_all_commented_out_adds_nothing(tmp_path):
    (tmp_path / "config.yaml").write_text("include: [more.yaml]\nplugins:\n  echo:\n    enabled: true\n")
    (tmp_path / "more.yaml").write_text("plugins:\n#  old: {}\n")
    config = load_gateway_config(tmp_path, {})
    assert list(config.plugins) == ["echo"]


def test_an_empty_plugin_entry_means_defaults(tmp_path):
    (tmp_path / "config.yaml").write_text("plugins:\n  echo:\n")
    config = load_gateway_config(tmp_path, {})
    assert config.plugins["echo"].enabled is True and config.plugins["echo"].uses == "echo"


def test_a_reload_applies_the_new_log_level(config_dir, monkeypatch) -> None:
    """SIGHUP's reload (RuntimeHolder.reload) takes a changed `service.log_level` at once, as the
    rest of the config."""
    import logging

    from tests.support.runtime import installed_runtime

    monkeypatch.delenv("DUCTILE_LOG_LEVEL", raising=False)
    gateway_log = logging.getLogger("ductile")
    before = gateway_log.level
    config_dir.service["log_level"] = "warn"
    try:
        with installed_runtime(config_dir) as holder:
            assert gateway_log.getEffectiveLevel() == logging.WARNING
            config_dir.service["log_level"] = "error"
            config_dir.write()
            holder.reload()
            assert gateway_log.getEffectiveLevel() == logging.ERROR
    finally:
        gateway_log.setLevel(before)
