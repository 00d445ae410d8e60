"""Issue 12, defect 8: config bombs. A YAML alias bomb in plugins.yaml took 102 s and 6.6 GB to
reject, a 4.4 MB config 37 s to check. Alias expansion and file size are bounded: `config check`
refuses either at once, naming the file (and the line where the expansion passes the bound),
and every other process refuses to start on it the same way (a bad config never half-loads)."""

from __future__ import annotations

import json
import resource

import pytest

from tests.support.processes import ductile

pytestmark = [pytest.mark.process]

# Nine levels of ten aliases each: 10^9 values once expanded, 300 bytes written.
ALIAS_BOMB = """\
x-a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
x-b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
x-c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
x-d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
x-e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
x-f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
x-g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
x-h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
x-i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h, *h]
plugins:
  echo:
    config:
      message: hi
      payload: *i
"""


def limits() -> None:
    """A bomb must not take the machine: past 60 s of CPU or 2 GiB the child is killed."""
    resource.setrlimit(resource.RLIMIT_CPU, (60, 60))
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def check(cfg) -> tuple[int, dict]:
    proc = ductile(cfg, "config", "check", "--json", timeout=120, limits=limits)
    assert proc.stdout.startswith("{"), (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    return proc.returncode, json.loads(proc.stdout)


@pytest.fixture
def cfg(config_dir):
    config_dir.extra["include"] = ["plugins.yaml"]
    # Unsealed: sealing reads the files in this process, which has no limits (an unsealed
    # directory only warns, outside strict mode).
    config_dir.sealed = False
    return config_dir


def test_an_alias_bomb_is_refused_naming_the_file_and_line(cfg):
    plugins = cfg.file("plugins.yaml", ALIAS_BOMB)
    cfg.write()
    code, report = check(cfg)
    assert code == 78, report
    [problem] = [e for e in report["errors"] if e["file"] == str(plugins)]
    assert "alias" in problem["message"], problem
    # The line of the value whose expansion passes the bound: one of the lines of aliases.
    line = problem["line"]
    assert line and "*" in ALIAS_BOMB.splitlines()[line - 1], problem
    # A process that would run on it refuses it the same way, promptly.
    start = ductile(cfg, "runworkers", "--once", timeout=120, limits=limits)
    assert start.returncode == 78 and f"{plugins}:{line}" in start.stderr, start.stderr


def test_a_recursive_alias_is_refused(cfg):
    plugins = cfg.file("plugins.yaml", "x-loop: &loop [1, *loop]\nplugins:\n  echo:\n    config: {message: *loop}\n")
    cfg.write()
    code, report = check(cfg)
    assert code == 78, report
    [problem] = [e for e in report["errors"] if e["file"] == str(plugins)]
    assert "recursive" in problem["message"] and problem["line"] == 1, problem


def test_an_oversized_config_file_is_refused_unread(cfg):
    # 4.4 MB, as the config that took 37 s to check: 56,000 plugin entries.
    entries = "".join(
        f"  e{n}: {{uses: echo, config: {{message: 'a message of some length {n:08}'}}}}\n" for n in range(56000)
    )
    plugins = cfg.file("plugins.yaml", "plugins:\n" + entries)
    assert plugins.stat().st_size > 4_000_000
    cfg.write()
    code, report = check(cfg)
    assert code == 78, report
    [problem] = [e for e in report["errors"] if e["file"] == str(plugins)]
    assert "MiB" in problem["message"] and "include" in problem["message"], problem


def test_anchors_of_a_normal_config_still_expand(cfg):
    cfg.file(
        "plugins.yaml",
        "x-defaults: &defaults {timeout: 30s, retry: {max_attempts: 2}}\n"
        "plugins:\n"
        + "".join(f"  e{n}: {{uses: echo, <<: *defaults, config: {{message: m{n}}}}}\n" for n in range(300)),
    )
    cfg.write()
    code, report = check(cfg)
    assert code == 0 and report["valid"], report
