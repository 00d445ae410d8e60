"""The cookbook configs (fixtures/cookbook/, spec 000's recipes and tutorials as printed) pass
`config check --strict` once sealed, and run end to end through the real CLI and plugins, with
local fixtures only: a temporary HOME, and a stand-in for `docker` that records how it was called.

Each recipe is copied to a temporary tree of the same depth, beside a link to this checkout's
plugin root, so that its relative `plugin_roots` resolve as in the checkout, and the seal and the
ledger it writes stay out of the repository."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from tests.support.checkout import REPO
from tests.support.config_dirs import ConfigDir
from tests.support.processes import ductile, ductile_json

COOKBOOK = REPO / "fixtures" / "cookbook"


def as_env(env: dict[str, str]) -> dict[str, Any]:
    """`env` as `ductile`'s keyword arguments (its other keywords are not environment names)."""
    return env


def recipe(name: str, tmp_path: Path, **env: str) -> ConfigDir:
    """The recipe's directory, sealed (`config lock`) and checked in strict mode. `env` is every
    command's environment from then on (the API token the recipes read from it included)."""
    env.setdefault("DUCTILE_ADMIN_TOKEN", "cookbook-admin-token-0123456789")
    copy = tmp_path / "fixtures" / "cookbook" / name
    shutil.copytree(COOKBOOK / name, copy)
    (tmp_path / "plugins").symlink_to(REPO / "plugins")
    cfg = ConfigDir(copy)
    lock = ductile(cfg, "config", "lock", **as_env(env))
    assert lock.returncode == 0, lock.stderr
    code, check = ductile_json(cfg, "config", "check", "--strict", **env)
    assert (code, check["errors"]) == (0, []), check
    return cfg


def test_getting_started_the_echo_showcase(tmp_path):
    env = {"DUCTILE_ADMIN_TOKEN": "cookbook-admin-token-0123456789"}
    cfg = recipe("getting-started", tmp_path, **env)
    code, run = ductile_json(cfg, "plugin", "run", "echo", **env)
    assert code == 0 and run["status"] == "succeeded", run
    _, schedules = ductile_json(cfg, "system", "scheduler", **env)
    [entry] = schedules["entries"]
    assert (entry["plugin"], entry["schedule_id"]) == ("echo", "default")


def test_the_astro_staging_rebuild_recipe(tmp_path):
    home = tmp_path / "home"
    summaries = home / "site" / "src" / "content" / "summaries"
    summaries.mkdir(parents=True)
    (summaries / "first.md").write_text("a summary")
    (home / "admin").mkdir()
    (home / "admin" / "docker-compose.yml").write_text("services: {}\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "docker-calls"
    docker = bin_dir / "docker"
    docker.write_text(f'#!/bin/sh\nprintf "%s|%s\\n" "$PWD" "$*" >> {calls}\n')
    docker.chmod(0o755)
    env = {
        "HOME": str(home),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "DUCTILE_ADMIN_TOKEN": "cookbook-admin-token-0123456789",
    }
    cfg = recipe("astro-rebuild", tmp_path, **env)

    baseline = ductile_json(cfg, "plugin", "run", "folder_watch", **env)[1]
    assert baseline["status"] == "succeeded" and not calls.exists()  # the first poll is a baseline
    (summaries / "2026").mkdir()
    (summaries / "2026" / "new.md").write_text("a new summary")
    changed = ductile_json(cfg, "plugin", "run", "folder_watch", **env)[1]
    assert changed["status"] == "succeeded", changed
    drained = ductile(cfg, "runworkers", "--once", **as_env(env))
    assert drained.returncode == 0, drained.stderr
    assert calls.read_text().splitlines() == [
        f"{home / 'admin'}|compose -f {home}/admin/docker-compose.yml up -d --build"
    ]
    _, logs = ductile_json(cfg, "job", "logs", "--plugin", "astro_rebuild_staging", "--include-result", **env)
    [rebuilt] = logs["logs"]
    assert rebuilt["status"] == "succeeded"
    _, job = ductile_json(cfg, "job", "inspect", rebuilt["job_id"], **env)
    assert job["payload"]["created"] == ["2026/new.md"]  # the event it ran for


def test_the_route_youtube_vs_web_recipe(tmp_path):
    env = {"DUCTILE_ADMIN_TOKEN": "cookbook-admin-token-0123456789"}
    cfg = recipe("route-youtube-vs-web", tmp_path, **env)
    for text in ("https://youtu.be/abc", "https://example.org/page", "just words"):
        code, published = ductile_json(
            cfg, "event", "publish", "discord.ai.command", "--payload", json.dumps({"text": text}), **env
        )
        assert code == 0, published
    drained = ductile(cfg, "runworkers", "--once", **as_env(env))
    assert drained.returncode == 0, drained.stderr
    _, logs = ductile_json(cfg, "job", "logs", "--limit", "50", **env)
    handled = [entry for entry in logs["logs"] if entry["command"] == "handle"]  # not the classifier's init
    assert all(entry["status"] == "succeeded" for entry in handled)
    # The YouTube link takes youtube-wisdom's three steps, the web link web-summarize's one; plain
    # text is classified `text.received`, which no pipeline takes.
    assert Counter(entry["plugin"] for entry in handled) == {
        "check_youtube": 3,
        "youtube_transcript": 1,
        "fabric": 2,
        "file_handler": 1,
    }
    [transcript] = [entry for entry in handled if entry["plugin"] == "youtube_transcript"]
    _, job = ductile_json(cfg, "job", "inspect", transcript["job_id"], **env)
    assert job["payload"]["text"] == "https://youtu.be/abc"
