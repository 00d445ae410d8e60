"""Configured plugin instances (names and `uses:` aliases) joined with discovered manifests.

An instance that cannot load is skipped with a reason; it never stops the others.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gateway.config.errors import ConfigProblem
from gateway.config.frozen import thaw
from gateway.config.model import GatewayConfig, PluginConfig
from gateway.config.validity import SchemaUnusable, describe, schema_errors, unknown_keys
from ledger.caps import Cap
from pipelines.dsl import SWITCH

from .discovery import Discovery
from .manifest import CommandSpec, Manifest
from .sandboxing import Confinement, Unconfinable, confine

# How a plugin skipped for its sandbox is reported (`system doctor` tells it from the other reasons).
UNCONFINABLE = "its sandbox cannot be enforced on this host"


@dataclass(frozen=True)
class PluginInstance:
    name: str
    config: PluginConfig
    manifest: Manifest
    # How many of its jobs may run at once across every node sharing the ledger (None: no cap
    # there), and on one node (spec §4.2.1's `parallelism`, per node).
    parallelism: int | None
    node_parallelism: int
    # How its sandbox is enforced here (gateway.plugins.sandboxing); the host profile when disabled.
    confinement: Confinement = field(default_factory=Confinement)

    @property
    def cap(self) -> Cap:
        return Cap(self.parallelism, self.node_parallelism)

    @property
    def shown_parallelism(self) -> int:
        """What `plugin list` and the console show: the cap across nodes, or where there is none
        what one node runs (on one node, the spec's `parallelism` either way)."""
        return self.parallelism or self.node_parallelism

    def command(self, name: str) -> CommandSpec | None:
        return self.manifest.commands.get(name)


@dataclass(frozen=True)
class Registry:
    instances: Mapping[str, PluginInstance]  # enabled and loadable: these run jobs
    disabled: Mapping[str, PluginInstance]  # `enabled: false`
    skipped: Mapping[str, str]  # configured but refused, with the reason
    discovery: Discovery
    warnings: tuple[ConfigProblem, ...]
    # A skipped instance's config problems, each at its file, line and key (its config_schema's
    # verdict): what strict mode refuses the config with.
    refusals: Mapping[str, tuple[ConfigProblem, ...]]

    def parallelism_caps(self) -> dict[str, Cap]:
        return {name: inst.cap for name, inst in self.instances.items()}

    def claim_caps(self) -> dict[str, Cap]:
        """What a worker may claim: every plugin at its caps, plus the internal `if:` hops, which
        run in-process in microseconds, so any worker may take one (no cap across nodes)."""
        caps = self.parallelism_caps()
        caps[SWITCH] = Cap(None, max((c.node for c in caps.values()), default=1))
        return caps


def build_registry(config: GatewayConfig, discovery: Discovery) -> Registry:
    instances: dict[str, PluginInstance] = {}
    disabled: dict[str, PluginInstance] = {}
    skipped: dict[str, str] = {}
    refusals: dict[str, tuple[ConfigProblem, ...]] = {}
    warnings = list(discovery.warnings)
    # A refused manifest answers for its directory's name and for the name it declares.
    invalid_by_name: dict[str, list[ConfigProblem]] = {}
    for directory, problems in discovery.invalid.items():
        invalid_by_name.setdefault(directory.name, problems)
        if directory in discovery.invalid_names:
            invalid_by_name.setdefault(discovery.invalid_names[directory], problems)
    for name, plugin in config.plugins.items():
        manifest = discovery.manifests.get(plugin.uses)
        if manifest is None:
            if plugin.uses in invalid_by_name:
                reasons = "; ".join(str(p) for p in invalid_by_name[plugin.uses])
                skipped[name] = f"manifest of {plugin.uses!r} is invalid: {reasons}"
            else:
                roots = ", ".join(str(r) for r in config.plugin_roots) or "(no plugin_roots configured)"
                skipped[name] = f"no plugin named {plugin.uses!r} found in plugin roots {roots}"
            continue
        cap = _parallelism(config, plugin, manifest)
        if not plugin.enabled:
            # Disabled by the operator: listed as such, its config not held against it.
            disabled[name] = PluginInstance(
                name=name, config=plugin, manifest=manifest, parallelism=cap.cluster, node_parallelism=cap.node
            )
            continue
        if manifest.cannot_run:
            skipped[name] = manifest.cannot_run
            continue
        missing = [key for key in manifest.required_config if key not in plugin.config]
        if missing:
            skipped[name] = f"missing required config keys {', '.join(missing)} (manifest config_keys.required)"
            continue
        if manifest.config_schema is not None:
            refused, unknown = _schema_verdict(config, name, plugin, manifest)
            if refused:
                refusals[name] = refused
                skipped[name] = "config does not match the plugin's config_schema: " + "; ".join(map(str, refused))
                continue
            warnings += unknown
        declared = set(manifest.required_config) | set(manifest.optional_config)
        if declared:
            for key in plugin.config:
                if key not in declared:
                    warnings.append(
                        ConfigProblem(
                            f"config key {key!r} is not declared by plugin {manifest.name!r} and may be ignored",
                            file=plugin.source,
                            key=f"plugins.{name}.config.{key}",
                        )
                    )
        try:
            confinement = confine(plugin.sandbox, manifest.directory)
        except Unconfinable as exc:
            # Never run it less isolated than configured: refused, with what this host lacks.
            skipped[name] = f"{UNCONFINABLE}: {exc}"
            continue
        instances[name] = PluginInstance(
            name=name,
            config=plugin,
            manifest=manifest,
            parallelism=cap.cluster,
            node_parallelism=cap.node,
            confinement=confinement,
        )
    for name, reason in skipped.items():
        warnings.append(ConfigProblem(f"plugin {name!r} skipped: {reason}", key=f"plugins.{name}"))
    return Registry(
        instances=MappingProxyType(instances),
        disabled=MappingProxyType(disabled),
        skipped=MappingProxyType(skipped),
        discovery=discovery,
        warnings=tuple(warnings),
        refusals=MappingProxyType(refusals),
    )


def _schema_verdict(
    config: GatewayConfig, name: str, plugin: PluginConfig, manifest: Manifest
) -> tuple[tuple[ConfigProblem, ...], list[ConfigProblem]]:
    """(the config's problems under the manifest's config_schema, each at its file, line and key;
    warnings for keys the schema marks `x-warn-unknown` and does not name)."""
    assert manifest.config_schema is not None
    document = thaw(plugin.config)
    base = ("plugins", name, "config")
    try:
        errors = schema_errors(manifest.config_schema, document, foreign=True)
    except SchemaUnusable as exc:
        problem = ConfigProblem(f"config_schema cannot be applied: {exc}", file=manifest.file, key="config_schema")
        return (problem,), []
    found = sorted(map(describe, errors), key=lambda where_what: list(map(str, where_what[0])))
    problems = tuple(config.problem((*base, *path), message) for path, message in found)
    unknown = [
        config.problem(
            (*base, *path), f"config key {path[-1]!r} is not declared by plugin {manifest.name!r} and may be ignored"
        )
        for path in unknown_keys(manifest.config_schema, document)
    ]
    return problems, unknown


def _parallelism(config: GatewayConfig, plugin: PluginConfig, manifest: Manifest) -> Cap:
    """Spec §4.2.1 on each node: the operator's `parallelism`, else 1 for `concurrency_safe:
    false`, else max_workers. Across nodes: the operator's `parallelism` (on one node the same
    cap), else 1 for a plugin that is not concurrency-safe, else none: each node added runs
    max_workers more. `node_parallelism` caps one node below that."""
    workers = config.service.max_workers
    cluster = plugin.parallelism or (None if manifest.concurrency_safe else 1)
    node = plugin.node_parallelism or min(cluster or workers, workers)
    return Cap(cluster, node)
