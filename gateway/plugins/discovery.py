"""Plugin discovery over `plugin_roots`, in order; the first plugin with a name wins."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gateway.config.errors import ConfigProblem

from .manifest import MANIFEST_FILE, Manifest, ManifestInvalid, load_manifest


@dataclass
class Discovery:
    manifests: dict[str, Manifest] = field(default_factory=dict)
    # Directories that hold a manifest we refused, with every reason.
    invalid: dict[Path, list[ConfigProblem]] = field(default_factory=dict)
    # The plugin name each refused manifest declares, when it got that far.
    invalid_names: dict[Path, str] = field(default_factory=dict)
    warnings: list[ConfigProblem] = field(default_factory=list)
    # Roots that cannot be scanned (missing, not a directory, unreadable), with why: an error for
    # whoever loads the config (the original refuses to start), which knows where each is written.
    unusable_roots: dict[Path, str] = field(default_factory=dict)

    def refuse(self, directory: Path, problems: list[ConfigProblem], name: str | None = None) -> None:
        """Skip `directory`, with a warning naming every reason; the other plugins carry on."""
        self.invalid[directory] = problems
        if name:
            self.invalid_names[directory] = name
        reasons = "; ".join(str(p) for p in problems)
        self.warnings.append(ConfigProblem(f"plugin in {directory} is not loaded: {reasons}", file=directory))


def discover_plugins(roots: tuple[Path, ...], *, allow_symlinks: bool = False) -> Discovery:
    found = Discovery()
    for root in roots:
        if not root.is_dir():
            what = "is not a directory" if root.exists() else "does not exist"
            found.unusable_roots[root] = f"plugin root {root} {what}"
            continue
        try:
            entries = sorted(root.iterdir())
        except OSError as exc:
            found.unusable_roots[root] = f"plugin root {root} cannot be read: {exc.strerror}"
            continue
        for directory in entries:
            # `_lib`, `_template` and dot-directories hold helpers, not plugins.
            if directory.name.startswith(("_", ".")) or not (directory / MANIFEST_FILE).is_file():
                continue
            if directory.is_symlink():
                found.warnings.append(ConfigProblem(f"plugin directory {directory} is a symlink", file=directory))
                if not allow_symlinks:
                    found.refuse(
                        directory,
                        [
                            ConfigProblem(
                                "symlinked plugin directories need service.allow_symlinks: true", file=directory
                            )
                        ],
                    )
                    continue
            try:
                manifest = load_manifest(directory, root, found.warnings)
            except ManifestInvalid as exc:
                found.refuse(directory, exc.problems, exc.name)
                continue
            except OSError as exc:
                found.refuse(directory, [ConfigProblem(f"cannot read manifest: {exc}", file=directory)])
                continue
            if manifest.name in found.manifests:
                first = found.manifests[manifest.name].directory
                found.warnings.append(
                    ConfigProblem(
                        f"plugin {manifest.name!r} in {directory} is ignored: {first} was found first",
                        file=manifest.file,
                    )
                )
                continue
            found.manifests[manifest.name] = manifest
    return found
