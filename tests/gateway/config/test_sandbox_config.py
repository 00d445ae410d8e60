"""`sandbox:` per plugin and the gateway-wide `service.sandbox_default`, `sandbox_limits`,
`sandbox_user` (issue 39, docs/sandbox.md): typed, layered, and refused at file, line and key.
No database: these tests only touch the filesystem."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config.sandbox import DEFAULT_LIMITS, Limits, physical_memory, size_text
from tests.gateway.config.test_config import line_of, load, only_problem, write


def test_a_config_written_for_the_original_runs_on_the_host_with_the_generous_limits(tmp_path: Path) -> None:
    write(tmp_path, "config.yaml", "plugins:\n  echo: {config: {message: hi}}\n")
    config = load(tmp_path)
    sandbox = config.plugins["echo"].sandbox
    assert (sandbox.network, sandbox.filesystem, sandbox.user) == ("host", "host", None)
    assert sandbox.limits == DEFAULT_LIMITS and not sandbox.isolated
    assert not config.warnings
    assert sandbox.describe() == (
        f"network=host filesystem=host limits=memory:{size_text(physical_memory())},"
        "cpu:3600s,files:8192,fsize:32GB,nproc:4096"
    )


def test_a_strict_default_isolates_plugins_without_their_own_sandbox_and_keys_left_out_keep_it(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        "config.yaml",
        """
        service:
          sandbox_default: strict
          sandbox_limits: {memory: 512MB, cpu: 2m}
        plugins:
          echo: {config: {message: hi}}
          probe:
            sandbox: {writable: [/var/lib/probe], limits: {open_files: 64, file_size: unlimited}}
          stress:
            sandbox: {network: host, filesystem: host}
          quick:
            sandbox: {egress: [api.example.com, "*.example.org", "10.0.0.1:8443"]}
        """,
    )
    plugins = load(tmp_path).plugins
    assert (plugins["echo"].sandbox.network, plugins["echo"].sandbox.filesystem) == ("none", "strict")
    assert not plugins["echo"].own_sandbox and plugins["probe"].own_sandbox
    probe = plugins["probe"].sandbox
    assert (probe.network, probe.filesystem, probe.writable) == ("none", "strict", (Path("/var/lib/probe"),))
    assert probe.limits == Limits(
        memory=512 * 1024**2, cpu=120, open_files=64, file_size=None, processes=DEFAULT_LIMITS.processes
    )
    assert (plugins["stress"].sandbox.network, plugins["stress"].sandbox.filesystem) == ("host", "host")
    quick = plugins["quick"].sandbox
    assert quick.network == "egress" and quick.egress == ("api.example.com", "*.example.org", "10.0.0.1:8443")


def test_a_misspelt_sandbox_key_is_refused_at_its_line_never_ignored(tmp_path: Path) -> None:
    """Ignored, `netwrok: none` would leave the plugin on the host's network while its author
    believes it has none."""
    config = write(tmp_path, "config.yaml", "plugins:\n  echo:\n    sandbox:\n      netwrok: none\n")
    problem = only_problem(tmp_path)
    assert (problem.file, problem.line, problem.key) == (config, 4, "plugins.echo.sandbox.netwrok")
    assert "unknown key 'netwrok' (expected network, egress," in problem.message


@pytest.mark.parametrize(
    ("sandbox", "key", "says"),
    [
        ("{network: lan}", "plugins.echo.sandbox.network", "'lan' is not one of ['host', 'none', 'egress']"),
        ("{filesystem: strict, writable: [data]}", "plugins.echo.sandbox.writable[0]", "does not match '^/'"),
        ("{limits: {memory: lots}}", "plugins.echo.sandbox.limits.memory", "'lots'"),
        ("{limits: {processes: 0}}", "plugins.echo.sandbox.limits.processes", "0"),
        ("{egress: ['http://x.example']}", "plugins.echo.sandbox.egress[0]", "does not match"),
        ("{user: 'root; rm'}", "plugins.echo.sandbox.user", "'root; rm'"),
        (
            "{network: none, egress: [api.example.com]}",
            "plugins.echo.sandbox.egress",
            "egress lists hosts but network is 'none'",
        ),
    ],
)
def test_a_malformed_sandbox_is_refused_naming_file_line_and_key(
    tmp_path: Path, sandbox: str, key: str, says: str
) -> None:
    config = write(tmp_path, "config.yaml", f"plugins:\n  echo:\n    sandbox: {sandbox}\n")
    problem = only_problem(tmp_path)
    assert (problem.file, problem.line, problem.key) == (config, line_of(config, "sandbox"), key), problem
    assert says in problem.message, problem


def test_a_bad_gateway_default_is_refused_at_its_key(tmp_path: Path) -> None:
    config = write(tmp_path, "config.yaml", "service:\n  sandbox_default: paranoid\nplugins:\n  echo: {}\n")
    problem = only_problem(tmp_path)
    assert (problem.file, problem.line, problem.key) == (config, 2, "service.sandbox_default")
    assert "'paranoid' is not one of ['host', 'strict']" in problem.message
