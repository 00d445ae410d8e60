"""Config directories: `config.yaml` with the bundled and test plugin roots, sealed as `config
lock` seals them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.support.checkout import REPO

PLUGIN_ROOTS = [str(REPO / "plugins"), str(REPO / "tests" / "plugins")]


class ConfigDir:
    """Builds a config directory: `config.yaml` plus any extra files, written on demand."""

    def __init__(self, path: Path):
        self.path = path
        self.path.mkdir(parents=True, exist_ok=True)
        self.service: dict[str, Any] = {"max_workers": 2, "lease_ttl": "60s"}
        self.plugins: dict[str, Any] = {
            "echo": {"config": {"message": "hi"}},
            "stress": {"config": {}, "timeout": "20s", "retry": {"max_attempts": 1}},
            "probe": {"config": {}},
            "py-greet": {"config": {"name": "Test"}},
        }
        self.routes: list[dict[str, Any]] = []
        self.extra: dict[str, Any] = {}
        # Set by the `process_db` fixture on the PostgreSQL run: subprocesses use this database.
        self.database_url: str | None = None
        # `write()` seals the directory (`.checksums`) the way `config lock` does; integrity tests
        # turn it off or tamper afterwards.
        self.sealed = True

    @property
    def db_path(self) -> Path:
        return self.path / "state" / "ductile.db"

    def write(self) -> Path:
        doc = {
            "service": self.service,
            "plugin_roots": PLUGIN_ROOTS,
            "state": {"path": str(self.db_path)},
            "plugins": self.plugins,
            "routes": self.routes,
            **self.extra,
        }
        (self.path / "config.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        if self.sealed:
            self.lock()
        return self.path

    def lock(self) -> None:
        seal(self.path)

    def file(self, name: str, text: str) -> Path:
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        return target


def seal(directory: Path) -> None:
    """`config lock`: seal every file the config reads and fingerprint every configured plugin, as
    an operator would after editing (tests about what a config says, not about the seal, start
    from a sealed directory). A config whose files cannot be read is left unsealed: loading it
    reports why."""
    from gateway.config.errors import ConfigError
    from gateway.plugins.seal import lock_config

    try:
        lock_config(directory)
    except ConfigError:
        pass
