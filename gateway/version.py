"""The gateway's version, as installed (or the source tree's when run from a checkout), and the
git commit it was run from (spec 000 Operator Handbook: `ductile version` gives version, commit
and build time, for matching errors against deploys). No Django set-up here: the console script
answers `--version` from this module alone (gateway.cli.main)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import NamedTuple

SOURCE = Path(__file__).resolve().parent.parent  # the checkout, when the package runs from one
# Set by `system start` for its children: the command it was started as (`entry_point()`).
ENTRY_POINT_ENV = "DUCTILE_ENTRY_POINT"
ENTRY_POINTS = ("ductile", "manage.py")
# The plugin protocol this gateway speaks (spec 000 §6; gateway/execution/protocol.py).
PROTOCOL_VERSION = 2


@cache
def gateway_version() -> str:
    # Here, not at import: importlib.metadata is ~25 ms, and this module is imported by every
    # worker (the protocol's version) and CLI read that never asks for the gateway's.
    from importlib.metadata import PackageNotFoundError, version

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


class SourceCommit(NamedTuple):  # not a dataclass: `dataclasses` is ~10 ms of `ductile --version`
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


def version_report() -> tuple[dict[str, object], str]:
    """`ductile version`'s JSON and text."""
    import django  # its package alone: `get_version` needs no settings

    source = source_commit()
    data: dict[str, object] = {
        "version": gateway_version(),
        "protocol": PROTOCOL_VERSION,
        "python": platform.python_version(),
        "django": django.get_version(),
        # From the checkout the code runs from; null for an installed package, which records no
        # commit (nor a build time: no build step stamps one, so none is reported).
        "commit": source.commit if source else None,
        "commit_date": source.committed_at if source else None,
        "dirty": source.dirty if source else None,
    }
    text = f"ductile {data['version']} (protocol {PROTOCOL_VERSION}, Django {data['django']}, Python {data['python']})"
    if source:
        text += f"\ncommit {source.commit[:12]}{' (with uncommitted changes)' if source.dirty else ''}, "
        text += f"committed {source.committed_at}"
    return data, text
