"""The gateway's version, as installed (or the source tree's when run from a checkout), and the
git commit it was run from (spec 000 Operator Handbook: `ductile version` gives version, commit
and build time, for matching errors against deploys)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent  # the checkout, when the package runs from one
# Set by `system start` for its children: the command it was started as (`entry_point()`).
ENTRY_POINT_ENV = "DUCTILE_ENTRY_POINT"
ENTRY_POINTS = ("ductile", "manage.py")


@cache
def gateway_version() -> str:
    try:
        return version("ductile-django")
    except PackageNotFoundError:
        return "0.1.0+source"


@cache
def entry_point() -> str:
    """`/healthz`'s `binary_path`: the original reports its own executable; this gateway's
    processes are Python interpreters (gunicorn, manage.py), so what stands for it is the command
    the gateway runs as. `system start` tells its children the one it was started as (the `ductile`
    script, or manage.py); any other process names its own, else the `ductile` script installed
    beside its interpreter (the one `pip install` wrote)."""
    if told := os.environ.get(ENTRY_POINT_ENV):
        return told
    if Path(sys.argv[0]).name in ENTRY_POINTS:
        return os.path.abspath(sys.argv[0])
    script = Path(sys.executable).parent / "ductile"  # not resolved: a venv's python is a symlink
    return str(script) if script.is_file() else sys.executable


@dataclass(frozen=True)
class SourceCommit:
    commit: str
    committed_at: str  # ISO 8601, the commit's own date (not when it was built or installed)
    dirty: bool  # tracked files differ from the commit


def _git(directory: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None  # no git on this host: the commit is simply not known
    return proc.stdout.strip() if proc.returncode == 0 else None


def source_commit(directory: Path = SOURCE) -> SourceCommit | None:
    """The commit `directory` is checked out at, when it is the top of a git work tree (not merely
    somewhere inside one, as an installed package in a virtualenv inside a repository would be)."""
    top = _git(directory, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != directory.resolve():
        return None
    head = _git(directory, "log", "-1", "--format=%H %cI")
    if not head:
        return None  # a repository without commits
    commit, committed_at = head.split(" ", 1)
    status = _git(directory, "status", "--porcelain", "--untracked-files=no")
    return SourceCommit(commit, committed_at, bool(status))
