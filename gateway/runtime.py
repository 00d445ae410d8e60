"""The gateway's loaded state: config, plugin registry and routing table, as one immutable
snapshot. A reload builds a new snapshot and swaps it in whole, or keeps the old one.

Under `system start` every process serves the runtime the supervisor loaded, never the files on
disk (issue 33): the supervisor loads the config (at start, and at each SIGHUP) and, when it loads,
writes the runtime as a snapshot file beside its PID lock; its children (the API's and the webhook
listener's gunicorn workers, `runworkers`, the scheduler) read that snapshot, at start and at each
reload. So a broken edit fails one load, the supervisor's, and every process keeps the last good
runtime; a worker gunicorn starts again (after a crash) serves the same runtime as its siblings,
not a half-edited file; and an edit nobody reloaded is served by no process. The snapshot is a
pickle (the runtime is plain frozen dataclasses): 0600 in the state directory, which holds the
ledger and the PID lock with the same trust, read only by processes the supervisor started.
"""

from __future__ import annotations

import io
import os
import pickle
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gateway.config.durations import parse_duration
from gateway.config.errors import ConfigError, ConfigProblem
from gateway.config.frozen import thaw
from gateway.config.model import GatewayConfig, typed_config
from gateway.config.redaction import Scrubber, secret_values
from gateway.config.tokens import TokenRegistry, load_tokens
from gateway.config.validity import process_memo, schema_errors
from gateway.config.webhooks import Webhooks, serve_webhooks
from gateway.logs import apply_service_logging, hide_secrets
from gateway.plugins.discovery import Discovery, discover_plugins
from gateway.plugins.environment import plugin_environment
from gateway.plugins.registry import Registry, build_registry
from gateway.plugins.seal import PluginSeal, verify_plugins
from ledger.caps import Cap
from pipelines.dsl import RELAY, SWITCH, PipelineErrors, PipelineSet, compile_pipelines
from pipelines.routes import RouteRule, RoutingTable

if TYPE_CHECKING:
    from gateway.config.relay_endpoints import Relay


@dataclass(frozen=True)
class Runtime:
    config: GatewayConfig
    registry: Registry
    routing: RoutingTable
    pipelines: PipelineSet = field(default_factory=PipelineSet)
    # The environment every plugin process gets, fixed at load: clean plus the passthrough list.
    plugin_env: Mapping[str, str] = field(default_factory=dict)
    tokens: TokenRegistry = field(default_factory=TokenRegistry)
    # The plugins' code as sealed and as loaded: checked again before every spawn.
    plugin_seal: PluginSeal = field(default_factory=PluginSeal)
    # The webhook listener's endpoints, parsed once per load.
    webhooks: Webhooks = field(default_factory=Webhooks)
    # relay-instances.yaml and relay-ingress.yaml, parsed once per load; None when the config
    # has neither (no instances to send to, no ingress).
    relay: Relay | None = None
    # Not django.utils.timezone: this runs before settings exist (bootstrap decides the database).
    loaded_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @cached_property
    def scrubber(self) -> Scrubber:
        """What hides this config's secrets wherever plugin text is shown: made at its first use,
        once per loaded runtime (a process that never shows plugin text never makes it)."""
        return Scrubber(secret_values(self.config.document))

    def claim_caps(self) -> dict[str, Cap]:
        """What a worker may claim: the registry's caps, plus `relay:` steps' sends when this
        gateway has somewhere to relay to (each waits on the network, as a plugin would)."""
        caps = self.registry.claim_caps()
        if self.relay is not None and self.relay.instances:
            caps[RELAY] = caps[SWITCH]
        return caps


def build_runtime(
    config_dir: Path,
    environ: Mapping[str, str] | None = None,
    *,
    strict: bool = False,
    overrides: Mapping[Path, str] | None = None,
) -> Runtime:
    """Everything a process runs on, or ConfigError with every problem: each stage that can
    still run on what the previous ones built checks its part, and all of it is reported at once.
    `strict` and `overrides` as in `load_gateway_config` (`config check --strict`; `config set`
    validating its edit)."""
    try:
        return _assemble(config_dir, os.environ if environ is None else environ, strict, overrides)
    finally:
        # What passed its schema here is not validated again by the next process (nor is
        # jsonschema imported there): gateway.config.validity.
        process_memo().save()


def _assemble(
    config_dir: Path, environ: Mapping[str, str], strict: bool, overrides: Mapping[Path, str] | None
) -> Runtime:
    config, problems = typed_config(config_dir, environ, strict=strict, overrides=overrides)
    discovery = discover_plugins(config.plugin_roots, allow_symlinks=config.service.allow_symlinks)
    problems += root_problems(config, discovery)
    registry = build_registry(config, discovery)
    problems += schedule_problems(config, registry)
    plugin_seal = verify_plugins(config, registry)
    # Outside strict mode a failed plugin fingerprint check warns, as an operational file's does.
    gates = config.service.admission
    warned = plugin_seal.warnings if gates.verify_integrity_on_boot else (*plugin_seal.problems, *plugin_seal.warnings)
    registry = replace(registry, warnings=(*registry.warnings, *warned))
    routing = RoutingTable.compile(RouteRule(r.source, r.event_type, r.target, r.command) for r in config.routes)
    tokens = load_tokens(config)
    relay = None
    if "instances" in config.document or "remote_ingress" in config.document:
        # Imported here: every process loads a config at its start, and few relay.
        from gateway.config.relay_endpoints import parse_relay

        relay, relay_problems = parse_relay(config, tokens.secrets)
        problems += relay_problems
    try:
        pipelines = compile_config_pipelines(config, registry, relay.instances if relay else ())
    except ConfigError as exc:
        problems += exc.problems
        pipelines = PipelineSet()
    if gates.verify_integrity_on_boot:
        problems += plugin_seal.problems
    problems += strict_refusals(config, registry, tokens)
    # webhooks.yaml is a high-security file: a bad one stops every process (exit 78).
    webhooks = serve_webhooks(
        config.webhooks,
        plugin_commands(registry),
        tokens.secrets,
        tokens.unset,
        lambda path, message: problems.append(config.problem(path, message)),
    )
    if problems:
        raise ConfigError(problems)
    env = plugin_environment(config.service.plugin_env_passthrough)
    return Runtime(
        config=config,
        registry=registry,
        routing=routing,
        pipelines=pipelines,
        plugin_env=MappingProxyType(env),
        tokens=tokens,
        plugin_seal=plugin_seal,
        webhooks=webhooks,
        relay=relay,
    )


def plugin_commands(registry: Registry) -> dict[str, tuple[str, ...] | None]:
    """What each configured plugin can be asked to do; None for one skipped at load."""
    commands: dict[str, tuple[str, ...] | None] = {name: None for name in registry.skipped}
    for group in (registry.instances, registry.disabled):
        commands.update({name: tuple(inst.manifest.commands) for name, inst in group.items()})
    return commands


def root_problems(config: GatewayConfig, discovery: Discovery) -> list[ConfigProblem]:
    """A plugin root that cannot be scanned refuses the config (the original's discovery does),
    named at the `plugin_roots` entry that lists it."""
    written = [Path(r) for r in config.document.get("plugin_roots") or ()]
    return [
        config.problem(("plugin_roots", written.index(root)) if root in written else ("plugin_roots",), reason)
        for root, reason in discovery.unusable_roots.items()
    ]


def schedule_problems(config: GatewayConfig, registry: Registry) -> list[ConfigProblem]:
    """A schedule naming a command its plugin's manifest does not declare would only ever be
    paused by the scheduler: refused here, at the entry's `command` (or the entry, when the
    default `poll` is the one missing)."""
    problems = []
    for name, instance in registry.instances.items():
        for index, schedule in enumerate(config.plugins[name].schedules):
            if schedule.command not in instance.manifest.commands:
                declared = ", ".join(instance.manifest.commands)
                problems.append(
                    config.problem(
                        ("plugins", name, "schedules", index, "command"),
                        f'schedule "{schedule.id}": plugin {name!r} has no command {schedule.command!r} '
                        f"(its manifest declares {declared})",
                    )
                )
    return problems


def strict_refusals(config: GatewayConfig, registry: Registry, tokens: TokenRegistry) -> list[ConfigProblem]:
    """What the admission gates refuse beyond the seal (spec "Operator Guide", Strict Mode; the
    original's `service.admission`): with `validate_config_on_boot`, an enabled plugin that cannot
    run (the config check failed); with `require_api_auth`, an API without a single usable token."""
    gates = config.service.admission
    gate = "strict_mode" if gates.strict else "validate_config_on_boot"
    problems = []
    for name, reason in registry.skipped.items() if gates.validate_config_on_boot else ():
        if not config.plugins[name].enabled:
            continue
        if name in registry.refusals:  # each at its own line and key, where an agent can fix it
            problems += [
                replace(p, message=f"plugin {name!r} cannot run: {p.message} (refused in {gate})")
                for p in registry.refusals[name]
            ]
        else:
            problems.append(
                config.problem(("plugins", name), f"plugin {name!r} cannot run: {reason} (refused in {gate})")
            )
    if gates.require_api_auth and config.api.enabled and not tokens.tokens:
        problems.append(
            config.problem(
                ("api", "auth", "tokens"),
                f"{'strict_mode' if gates.strict else 'require_api_auth'} requires at least one API token "
                "while the API is enabled (api.auth.tokens or a tokens.yaml entry with scopes); refused "
                "tokens do not count",
            )
        )
    return problems


def compile_config_pipelines(
    config: GatewayConfig, registry: Registry, relay_targets: Iterable[str] = ()
) -> PipelineSet:
    """Compile `pipelines:` against the configured plugins and relay instances; errors name file,
    line and key."""
    try:
        return compile_pipelines(
            thaw(config.pipelines), plugin_commands(registry), parse_duration, schema_errors, relay_targets
        )
    except PipelineErrors as exc:
        raise ConfigError(config.problem(p.path, p.message) for p in exc.problems) from exc


# Set by `system start` for its children: the snapshot file they run on instead of the config files.
SNAPSHOT_ENV = "DUCTILE_RUNTIME_SNAPSHOT"
SNAPSHOT_FILE = "ductile.runtime"
# The moment `system start` started (a UNIX time), told to its children too: the API's uptime.
STARTED_ENV = "DUCTILE_STARTED_AT"


def _gateway_started() -> float:
    """When the gateway started: `system start`'s moment, which it tells its children, else this
    process's. A reload, or a worker gunicorn starts again, is no restart of the gateway: the
    uptime a monitor watches must not fall back to 0 at each (issue 33), and the API's and the
    webhook listener's /healthz report the same one."""
    try:
        return float(os.environ[STARTED_ENV])
    except (KeyError, ValueError):
        return time.time()


_STARTED = _gateway_started()


def uptime_seconds() -> int:
    return max(int(time.time() - _STARTED), 0)


class _SnapshotPickler(pickle.Pickler):
    """Mapping proxies (the runtime's read-only mappings) cannot be pickled as they are."""

    def reducer_override(self, obj: object) -> Any:
        if type(obj) is MappingProxyType:
            return _proxy, (dict(obj),)
        return NotImplemented


def _proxy(mapping: dict[str, object]) -> MappingProxyType[str, object]:
    return MappingProxyType(mapping)


def write_snapshot(runtime: Runtime, path: Path) -> None:
    """`runtime` into `path`, atomically (a reader sees the old snapshot or the new one), 0600."""
    buffer = io.BytesIO()
    _SnapshotPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(runtime)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    path.parent.mkdir(parents=True, exist_ok=True)  # the state directory, before the ledger made it
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(buffer.getvalue())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def read_snapshot(path: Path) -> Runtime:
    with open(path, "rb") as source:
        runtime = pickle.load(source)
    if not isinstance(runtime, Runtime):
        raise ConfigError([ConfigProblem(f"{path} holds no runtime snapshot", file=path)])
    return runtime


class RuntimeHolder:
    """Process-wide current runtime. Set at bootstrap; readers take one snapshot per job.
    `snapshot`: the file to load from instead of the config files (a child of `system start`:
    SNAPSHOT_ENV)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.config_dir: Path | None = None
        self.snapshot: Path | None = None
        self._current: Runtime | None = None
        self.error: ConfigError | None = None

    def load(self, config_dir: Path, environ: Mapping[str, str] | None = None, snapshot: Path | None = None) -> None:
        self.config_dir = config_dir
        chosen = (environ if environ is not None else os.environ).get(SNAPSHOT_ENV)
        self.snapshot = snapshot or (Path(chosen) if chosen else None)
        # The log's lines hide the secrets of whichever runtime this holder serves at the time.
        hide_secrets(lambda text: self.scrubber().text(text))
        try:
            runtime = self._build(environ)
        except ConfigError as exc:
            self.error = exc
            return
        with self._lock:
            self._current, self.error = runtime, None
        apply_service_logging(runtime.config.service.log_level, runtime.config.service.log_format)

    def get(self) -> Runtime:
        current = self._current
        if current is None:
            raise self.error or ConfigError([])
        return current

    def scrubber(self) -> Scrubber:
        """The scrubber of the runtime this process serves (the last one that loaded). Before any
        loaded, no secret is known, and it hides nothing."""
        current = self._current
        return current.scrubber if current is not None else NO_SECRETS

    def reload(self) -> tuple[Runtime, Runtime | None]:
        """Build a fresh runtime; on ConfigError the old one stays (the error propagates)."""
        new = self._build(None)
        return new, self.install(new)

    def install(self, new: Runtime) -> Runtime | None:
        """`new` as the current runtime; the one it replaces."""
        with self._lock:
            old, self._current, self.error = self._current, new, None
        apply_service_logging(new.config.service.log_level, new.config.service.log_format)
        return old

    def _build(self, environ: Mapping[str, str] | None) -> Runtime:
        assert self.config_dir is not None
        if self.snapshot is None:
            return build_runtime(self.config_dir, environ)
        try:
            return read_snapshot(self.snapshot)
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
            message = f"the runtime snapshot `system start` wrote cannot be read: {exc}"
            raise ConfigError([ConfigProblem(message, file=self.snapshot)]) from exc


NO_SECRETS = Scrubber()
RUNTIME = RuntimeHolder()
