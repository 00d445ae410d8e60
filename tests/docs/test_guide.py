"""The user's guide (docs/guide/, built by MkDocs from mkdocs.yml) stays true to the gateway.

- It builds with `mkdocs build --strict`: a link to a missing page or anchor fails the build.
- No link or resource in the built site leaves the repository except to the public pages listed
  in PUBLIC_PAGES (none today): the guide works offline and sends its readers nowhere unexpected.
- The configuration reference is generated from the JSON Schema the loader validates against
  (docs/tools/config_reference.py), and the defaults the schema states are the loader's own.
- Every key of the pipeline schema is named in the DSL reference.
- Every shell sample marked `<!-- runnable -->` runs, in order per page, against a temporary
  config directory and a temporary HOME, from the clone's root as the reader runs it, and exits 0.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from tests.support.checkout import REPO
from tests.support.config_dirs import ConfigDir
from tests.support.runtime import installed_runtime

GUIDE = REPO / "docs" / "guide"
# Public pages the guide may link to. Each addition is a page anyone can read without an account.
PUBLIC_PAGES: frozenset[str] = frozenset()
RUNNABLE = re.compile(r"^<!-- runnable -->\n```sh\n(.*?)\n```$", re.MULTILINE | re.DOTALL)
BIN = Path(sys.executable).parent  # the venv's bin: `ductile` and `mkdocs` are installed beside python


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "mkdocs"), "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        cwd=REPO,
    )


class Links(HTMLParser):
    """Every href and src in a page."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found += [value for name, value in attrs if name in ("href", "src") and value]


@pytest.mark.process
def test_the_guide_builds_strictly_and_links_nowhere_but_public_pages(tmp_path: Path) -> None:
    site = tmp_path / "site"
    built = mkdocs_build(REPO / "mkdocs.yml", site)
    assert built.returncode == 0, built.stderr
    pages = sorted(site.rglob("*.html"))
    assert {p.parent.name for p in pages} >= {"getting-started", "plugins", "pipelines", "config-reference", "api"}
    external = set()
    for page in pages:
        links = Links()
        links.feed(page.read_text())
        external |= {link for link in links.found if re.match(r"(?i)^(https?:)?//", link)}
    assert external <= PUBLIC_PAGES, f"links leaving the repository: {sorted(external - PUBLIC_PAGES)}"


@pytest.mark.process
def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The strict build is what catches a broken link: shown on a copy with one added."""
    copy = tmp_path / "guide"
    shutil.copytree(GUIDE, copy)
    with (copy / "operations.md").open("a") as page:
        page.write("\nSee [the restore page](restore.md) and [backups](configuration.md#no-such-heading).\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text((REPO / "mkdocs.yml").read_text().replace("docs_dir: docs/guide", f"docs_dir: {copy}"))
    built = mkdocs_build(config, tmp_path / "site")
    assert built.returncode != 0
    assert "restore.md" in built.stderr and "no-such-heading" in built.stderr, built.stderr


def generator() -> Any:
    path = REPO / "docs" / "tools" / "config_reference.py"
    spec = importlib.util.spec_from_file_location("config_reference", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_configuration_reference_is_the_schema_rendered() -> None:
    reference = generator()
    schema = json.loads(reference.SCHEMA.read_text())
    assert reference.PAGE.read_text() == reference.render(schema), (
        "docs/guide/config-reference.md is stale: run .venv/bin/python docs/tools/config_reference.py"
    )


def defaults(node: dict[str, Any], defs: dict[str, Any], path: str = "") -> dict[str, Any]:
    """Every `default` the schema states, by dotted path (`plugins.<name>.retry.max_attempts`)."""
    found = {path: node["default"]} if "default" in node else {}
    if "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[-1]]
    if isinstance(node.get("items"), dict):
        found |= defaults(node["items"], defs, f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        found |= defaults(node["additionalProperties"], defs, f"{path}.<name>")
    for key, child in node.get("properties", {}).items():
        found |= defaults(child, defs, f"{path}.{key}" if path else key)
    return found


def test_the_defaults_the_reference_states_are_the_loaders(config_dir: ConfigDir) -> None:
    """The page says what the schema says; this holds the schema's `default`s to what the loader
    actually fills in, so the reference cannot promise a default the gateway does not apply."""
    from gateway.config import relay_endpoints, webhooks
    from gateway.config.durations import parse_duration
    from gateway.config.model import BackupPolicy

    config_dir.service = {}
    config_dir.plugins = {"echo": {}}
    config_dir.routes = [{"from": "echo", "event_type": "echo.poll", "to": "echo"}]
    with installed_runtime(config_dir) as holder:
        config = holder.get().config
    echo = config.plugins["echo"]
    loaded = {
        **{f"service.{k}": v for k, v in vars(config.service).items() if k not in ("admission", "backup")},
        **{f"service.admission.{k}": v for k, v in vars(config.service.admission).items()},
        "service.backup.keep": BackupPolicy.keep,
        "service.backup.scope": BackupPolicy.scope,
        "service.sandbox_default": config.service.sandbox.profile,
        **{f"service.sandbox_limits.{k}": v for k, v in vars(config.service.sandbox.limits).items()},
        **{f"plugins.<name>.sandbox.limits.{k}": v for k, v in vars(echo.sandbox.limits).items()},
        "plugins.<name>.enabled": echo.enabled,
        "plugins.<name>.notify_on_complete": echo.notify_on_complete,
        "plugins.<name>.max_outstanding_polls": echo.max_outstanding_polls,
        "plugins.<name>.retry.max_attempts": echo.retry.max_attempts,
        "plugins.<name>.retry.backoff_base": echo.retry.backoff_base,
        "plugins.<name>.circuit_breaker.threshold": echo.circuit_breaker.threshold,
        "plugins.<name>.circuit_breaker.reset_after": echo.circuit_breaker.reset_after,
        "routes[].command": config.routes[0].command,
        "instances[].timeout": relay_endpoints.DEFAULT_TIMEOUT,
        "remote_ingress.listen_path": relay_endpoints.DEFAULT_LISTEN_PATH,
        "remote_ingress.allowed_clock_skew": relay_endpoints.DEFAULT_CLOCK_SKEW,
        **{f"api.{k}": v for k, v in vars(config.api).items()},
        "api.listen": str(config.api.listen),
        # Endpoints are typed where the config is (gateway/config/webhooks.py), with these defaults,
        # in `webhooks.endpoints` and in the bare list webhooks.yaml may hold.
        "webhooks.endpoints[].command": webhooks.DEFAULT_COMMAND,
        "webhooks.endpoints[].max_body_size": webhooks.DEFAULT_MAX_BODY_SIZE,
        "webhooks[].command": webhooks.DEFAULT_COMMAND,
        "webhooks[].max_body_size": webhooks.DEFAULT_MAX_BODY_SIZE,
    }
    schema = json.loads((REPO / "gateway" / "config" / "config.schema.json").read_text())
    stated = defaults(schema, schema["$defs"])
    # `enabled: true` of relay instances and peers is read where their entries are built
    # (gateway/config/relay_endpoints.py), which needs a whole relay set-up; the rest is checked.
    unchecked = {"instances[].enabled", "remote_ingress.peers[].enabled"}
    unknown = set(stated) - unchecked - set(loaded)
    assert not unknown, f"a default the schema states and this test does not check: {unknown}"
    for path, default in stated.items():
        if path in unchecked:
            continue
        expected = default
        if isinstance(default, str) and isinstance(loaded[path], float):
            expected = parse_duration(default)
        elif isinstance(default, str) and isinstance(loaded[path], int):
            expected = webhooks.parse_size(default)
        assert loaded[path] == expected, f"{path}: the schema says {default!r}, the loader uses {loaded[path]!r}"


def test_every_pipeline_key_is_in_the_dsl_reference() -> None:
    schema = json.loads((REPO / "pipelines" / "pipeline.schema.json").read_text())
    page = (GUIDE / "pipelines.md").read_text()
    keys = {key for kind in ("pipeline", "step") for key in schema["$defs"][kind]["properties"]}
    missing = sorted(key for key in keys if f"`{key}" not in page)
    assert not missing, f"pipeline keys the DSL reference does not explain: {missing}"


def runnable_pages() -> list[Path]:
    return sorted(page for page in GUIDE.glob("*.md") if "<!-- runnable -->" in page.read_text())


def test_every_runnable_marker_marks_a_shell_sample() -> None:
    for page in runnable_pages():
        text = page.read_text()
        marked = len(RUNNABLE.findall(text))
        assert text.count("<!-- runnable -->") == marked, f"{page.name}: a marker that is not on a ```sh block"


@pytest.mark.process
@pytest.mark.parametrize("page", runnable_pages(), ids=lambda page: page.stem)
def test_the_runnable_samples_run(page: Path, tmp_path: Path) -> None:
    """A page's samples, in order, in one shell, as a reader in the clone would type them."""
    home = tmp_path / "home"
    home.mkdir()
    drop = ("DATABASE_URL", "DUCTILE_DB_PATH", "DUCTILE_CONFIG_DIR", "DUCTILE_TEST_SQLITE_PATH", "DUCTILE_API_KEY")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env |= {"HOME": str(home), "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}"}
    config = tmp_path / "config"
    init = [str(BIN / "ductile"), "config", "init", str(config)]
    made = subprocess.run(init, capture_output=True, text=True, env=env, timeout=60)
    assert made.returncode == 0, made.stderr
    env["DUCTILE_CONFIG_DIR"] = str(config)
    script = "set -euo pipefail\ntrap 'echo \"sample failed: $BASH_COMMAND\" >&2' ERR\n"
    script += "\n".join(RUNNABLE.findall(page.read_text()))
    before = clone_status()
    ran = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert ran.returncode == 0, f"{page.name}: exit {ran.returncode}\n{ran.stdout[-3000:]}\n{ran.stderr[-3000:]}"
    assert clone_status() == before, f"{page.name}: a sample wrote into the clone (samples write under ~)"


def clone_status() -> str:
    """What git sees changed or added in the clone, ignored files aside."""
    return subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, cwd=REPO).stdout
