"""`ductile version`: version and protocol, and from a checkout the git commit it runs from."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from gateway.version import SOURCE, source_commit
from tests.support.config_dirs import ConfigDir
from tests.support.processes import ductile, ductile_json

pytestmark = pytest.mark.process


@pytest.fixture
def cfg(tmp_path) -> ConfigDir:
    config = ConfigDir(tmp_path / "config")
    config.write()
    return config


def git(directory, *args: str) -> str:
    return subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(not (SOURCE / ".git").exists() or shutil.which("git") is None, reason="not run from a checkout")
def test_version_json_reports_the_checkouts_commit(cfg):
    code, body = ductile_json(cfg, "version")
    assert code == 0
    assert body["commit"] == git(SOURCE, "rev-parse", "HEAD").strip()
    assert body["commit_date"] == git(SOURCE, "log", "-1", "--format=%cI").strip()
    assert body["dirty"] == bool(git(SOURCE, "status", "--porcelain", "--untracked-files=no").strip())
    text = ductile(cfg, "version").stdout
    assert f"commit {body['commit'][:12]}" in text


def test_no_commit_outside_a_checkout_or_inside_someone_elses(tmp_path):
    assert source_commit(tmp_path) is None  # not a git work tree at all
    outer = tmp_path / "repo"
    (outer / "site-packages").mkdir(parents=True)
    git(outer, "init", "-q")
    assert source_commit(outer) is None  # a repository without commits
    (outer / "f").write_text("x")
    git(outer, "add", "f")
    git(outer, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    # An installed package inside another project's repository did not come from that commit.
    assert source_commit(outer / "site-packages") is None
    found = source_commit(outer)
    assert found is not None and found.commit == git(outer, "rev-parse", "HEAD").strip() and not found.dirty
    (outer / "f").write_text("changed")
    changed = source_commit(outer)
    assert changed is not None and changed.dirty
