"""The typed, immutable gateway config, with the spec's defaults.

Built once from a validated merged document (`load_gateway_config`); every consumer reads these
objects, never YAML. Spec 000: "Configuration Specification" §4, §5.6 timeouts, §5.7 retry,
§3.5 dispatch, §3.6 dedupe.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pipelines.dsl import RELAY, SWITCH

from .api import ApiConfig, api_config
from .durations import format_duration, parse_duration
from .errors import ConfigError, ConfigProblem
from .frozen import freeze
from .loader import MergedConfig, load_config_tree
from .sandbox import EGRESS, Sandbox, SandboxDefaults, plugin_sandbox, sandbox_defaults
from .schedules import Schedule, parse_schedules
from .validity import describe_all, schema_errors, unknown_keys
from .webhooks import WebhooksConfig, webhooks_config
from .yamlsrc import KeyPath, coerce_yaml11_booleans

DEFAULT_TIMEOUTS: Mapping[str, float] = {"poll": 60.0, "handle": 120.0, "health": 10.0, "init": 30.0}
OTHER_COMMAND_TIMEOUT = 60.0
DEFAULT_DB_NAME = "ductile.db"
# The scheduler's tick: below the floor a config is refused (a tight tick floods dispatch with no
# visible cause); below the recommendation `system doctor` warns. The original's two thresholds.
MIN_TICK_INTERVAL = 0.1
RECOMMENDED_TICK_INTERVAL = 1.0


def default_max_workers() -> int:
    return max(1, (os.cpu_count() or 1) - 1)


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 4
    backoff_base: float = 30.0


@dataclass(frozen=True)
class CircuitBreakerPolicy:
    threshold: int = 3
    reset_after: float = 1800.0


@dataclass(frozen=True)
class BackupCadence:
    """How often `service.backup` runs: `kind` is cron (UTC), minutes, hourly, daily or weekly."""

    kind: str
    minutes: int | None = None
    cron: str | None = None


# django-q2 keeps an interval in a PositiveSmallIntegerField of minutes.
MAX_BACKUP_MINUTES = 32767


@dataclass(frozen=True)
class BackupPolicy:
    """`service.backup`: archives written by the housekeeping cluster (gateway/operations/housekeeping.py)
    into `directory`, the newest `keep` of them kept."""

    schedule: str
    cadence: BackupCadence
    directory: Path
    keep: int = 7
    scope: str = "config"


@dataclass(frozen=True)
class AdmissionPolicy:
    """`service.admission`: the original's four independent gates on what a config may hold to
    be loaded at start and reload, each off by default. `strict_mode: true` (and `config check
    --strict`) turns all four on; an `admission` block, when present, is used as written."""

    # A plugin whose code differs from its seal (`plugin_fingerprints`) is refused, not warned.
    verify_integrity_on_boot: bool = False
    # An operational file (config.yaml, its includes, `.env`) missing from or differing from the
    # seal refuses the config. High-security files refuse it whatever this says (spec 000 §2).
    fail_on_drift: bool = False
    # Unknown keys and enabled plugins that cannot run refuse the config instead of warning.
    validate_config_on_boot: bool = False
    # An enabled API with no usable token refuses the config.
    require_api_auth: bool = False

    @property
    def strict(self) -> bool:
        return all(getattr(self, f.name) for f in fields(self))


ALL_GATES = AdmissionPolicy(True, True, True, True)

# Keys the original reads that this gateway does not implement: warned as ignored even where
# `validate_config_on_boot` refuses unknown keys, so the original's own strict configs still load.
ORIGINAL_ONLY_KEYS: frozenset[KeyPath] = frozenset(
    {
        ("secrets",),
        ("accounts",),
        ("database",),
        ("service", "unconfined"),
        ("service", "admission", "fail_on_side_door"),
    }
)


def admission_policy(service: Mapping[str, Any], *, strict: bool = False) -> AdmissionPolicy:
    """The gates `service` (its raw mapping) asks for; `strict` (`config check --strict`) wins."""
    block = service.get("admission")
    if strict or (not isinstance(block, dict) and service.get("strict_mode") is True):
        return ALL_GATES
    if not isinstance(block, dict):
        return AdmissionPolicy()
    return AdmissionPolicy(**{f.name: block.get(f.name) is True for f in fields(AdmissionPolicy)})


@dataclass(frozen=True)
class ServiceConfig:
    name: str = "ductile"
    tick_interval: float = 60.0
    log_level: str = "info"
    log_format: str = "json"
    dedupe_ttl: float = 86400.0
    job_log_retention: float = 30 * 86400.0
    job_queue_retention: float = 86400.0
    # The original's finer history clocks; the first two follow job_log_retention unless set.
    job_transitions_retention: float = 30 * 86400.0
    job_attempts_retention: float = 30 * 86400.0
    breaker_transitions_retention: float = 90 * 86400.0
    max_workers: int = field(default_factory=default_max_workers)
    strict_mode: bool = False
    allow_symlinks: bool = False
    plugin_env_passthrough: tuple[str, ...] = ()
    hook_max_depth: int = 4
    # How long a claimed job stays ours without a heartbeat; past it any process may recover it.
    lease_ttl: float = 60.0
    backup: BackupPolicy | None = None
    admission: AdmissionPolicy = AdmissionPolicy()
    # Named worker groups: the plugins each group's workers claim (`runworkers --group NAME`).
    worker_groups: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    # The profile and limits of every plugin without its own `sandbox:` (docs/sandbox.md).
    sandbox: SandboxDefaults = field(default_factory=SandboxDefaults)

    def worker_group(self, name: str) -> tuple[str, ...]:
        """The plugins of group `name`; ValueError, saying which groups there are, if none has it."""
        if name not in self.worker_groups:
            known = ", ".join(sorted(self.worker_groups)) or "none: service.worker_groups is not set"
            raise ValueError(f"unknown worker group {name!r} (configured groups: {known})")
        return self.worker_groups[name]


@dataclass(frozen=True)
class PluginConfig:
    """One configured plugin instance: a plugin name, or an alias with `uses:`."""

    name: str
    uses: str
    enabled: bool
    config: Mapping[str, Any]
    # The plugin's cap across every node sharing the ledger (an external API's or a licence's
    # limit), and the cap on what one node runs of it; None when not configured.
    parallelism: int | None
    node_parallelism: int | None
    timeouts: Mapping[str, float]
    retry: RetryPolicy
    notify_on_complete: bool
    schedules: tuple[Schedule, ...]
    max_outstanding_polls: int
    circuit_breaker: CircuitBreakerPolicy
    source: Path | None = None
    # What its processes may touch: its own `sandbox:` over the gateway's default.
    sandbox: Sandbox = field(default_factory=Sandbox)
    # Whether the entry has a `sandbox:` of its own (`system doctor` names those left on the
    # host's network and filesystem under a strict default).
    own_sandbox: bool = False

    def timeout_for(self, command: str) -> float:
        if command in self.timeouts:
            return self.timeouts[command]
        return self.timeouts.get("*", DEFAULT_TIMEOUTS.get(command, OTHER_COMMAND_TIMEOUT))


@dataclass(frozen=True)
class Route:
    source: str
    event_type: str
    target: str
    command: str = "handle"


@dataclass(frozen=True)
class GatewayConfig:
    config_dir: Path
    state_path: Path
    service: ServiceConfig
    plugin_roots: tuple[Path, ...]
    plugins: Mapping[str, PluginConfig]
    routes: tuple[Route, ...]
    pipelines: tuple[Mapping[str, Any], ...]
    api: ApiConfig
    # Served with the secrets and commands they name by gateway.runtime (Runtime.webhooks).
    webhooks: WebhooksConfig
    document: Mapping[str, Any]
    files: tuple[Path, ...]
    env_files: tuple[Path, ...]
    warnings: tuple[ConfigProblem, ...] = ()
    # Where every key came from, so later checks (pipelines, doctor) can name file and line.
    merged: MergedConfig | None = field(default=None, compare=False, repr=False)

    def scheduled_entries(self) -> tuple[Schedule, ...]:
        """The entries the scheduler runs: those of enabled plugins, in config order."""
        return tuple(entry for plugin in self.plugins.values() if plugin.enabled for entry in plugin.schedules)

    def problem(self, path: KeyPath, message: str) -> ConfigProblem:
        if self.merged is None:
            return ConfigProblem(message, key=".".join(map(str, path)))
        return self.merged.problem(path, message)


@cache
def config_schema() -> dict[str, Any]:
    return json.loads((Path(__file__).with_name("config.schema.json")).read_text(encoding="utf-8"))


def load_gateway_config(
    config_dir: Path,
    environ: Mapping[str, str] | None = None,
    *,
    strict: bool = False,
    overrides: Mapping[Path, str] | None = None,
) -> GatewayConfig:
    """Read, merge, validate and type a config directory. Raises ConfigError with every problem.
    `strict` applies strict mode whatever `service.strict_mode` says (`config check --strict`);
    `overrides` as in `load_config_tree`."""
    config, refused = typed_config(config_dir, environ, strict=strict, overrides=overrides)
    if refused:
        raise ConfigError(refused)
    return config


def typed_config(
    config_dir: Path,
    environ: Mapping[str, str] | None = None,
    *,
    strict: bool = False,
    overrides: Mapping[Path, str] | None = None,
) -> tuple[GatewayConfig, list[ConfigProblem]]:
    """`load_gateway_config`, but what the admission gates refuse (the seal's refusals; with
    `fail_on_drift` its operational problems, spec §2; with `validate_config_on_boot` unknown keys)
    is returned beside the config, which is built regardless: a
    caller that goes on checking reports it with everything else it finds (issue 12: `config
    check --strict` on an unsealed directory reported the missing seal alone). Raises ConfigError,
    those problems included, when the config cannot be built."""
    merged = load_config_tree(config_dir, os.environ if environ is None else environ, overrides, check_seal=False)
    refused = list(merged.integrity.refusals)
    problems, unknown = _schema_problems(merged)  # also reads YAML 1.1 booleans such as `strict_mode: yes`
    service = merged.data.get("service")
    raw_service: dict[str, Any] = service if isinstance(service, dict) else {}
    gates = admission_policy(raw_service, strict=strict)
    if gates.fail_on_drift:
        refused += merged.integrity.operational
    else:
        merged.warnings.extend(merged.integrity.operational)
    if isinstance(raw_service.get("admission"), dict) and "strict_mode" in raw_service and not strict:
        merged.warnings.append(
            merged.problem(("service", "strict_mode"), "strict_mode is ignored: service.admission sets the gates")
        )
    for path in unknown:
        if gates.validate_config_on_boot and path not in ORIGINAL_ONLY_KEYS:
            refused.append(merged.problem(path, f"unknown key {path[-1]!r} (refused: validate_config_on_boot)"))
        else:
            # Warned by name, not refused: configs written for newer gateways still load.
            merged.warnings.append(merged.problem(path, f"unknown key {path[-1]!r} is ignored"))
    if not problems:
        try:
            return _Builder(merged, gates).build(), refused
        except ConfigError as exc:
            raise ConfigError([*refused, *exc.problems]) from exc
    # Schema problems are the whole story only when the typed checks have nothing to add:
    # report theirs too (parallelism over max_workers, retention under dedupe_ttl, ...), once per key.
    reported = {p.key for p in problems}
    builder = _Builder(merged, gates)
    try:
        builder.build()
    except (ConfigError, TypeError, ValueError, KeyError, AttributeError):
        # A document the schema refused can trip the builder (the schema problems say why):
        # what it found before it tripped (`api` and `webhooks` are typed last) is reported too.
        pass
    problems.extend(p for p in builder.problems if p.key not in reported)
    raise ConfigError([*refused, *problems])


def _schema_problems(merged: MergedConfig) -> tuple[list[ConfigProblem], list[KeyPath]]:
    """The schema's refusals, and the paths of the keys it does not know."""
    found = []
    coerce_yaml11_booleans(config_schema(), merged.data, _deref)
    for error in schema_errors(config_schema(), merged.data):
        for path, message in describe_all(error):
            if error.validator == "propertyNames":
                message = f"invalid name: {error.message}"
            found.append((path, message))
    found.sort(key=lambda problem: list(map(str, problem[0])))
    return [merged.problem(path, message) for path, message in found], unknown_keys(config_schema(), merged.data)


def _deref(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return config_schema()["$defs"][ref.removeprefix("#/$defs/")]  # type: ignore[no-any-return]
    return schema


class _Builder:
    def __init__(self, merged: MergedConfig, gates: AdmissionPolicy):
        self.merged = merged
        self.gates = gates
        self.data = merged.data
        self.problems: list[ConfigProblem] = []

    def build(self) -> GatewayConfig:
        service = self._service()
        plugins = {name: self._plugin(name, raw, service) for name, raw in (self.data.get("plugins") or {}).items()}
        self._worker_groups(service, plugins)
        routes = tuple(
            Route(r["from"], r["event_type"], r["to"], r.get("command", "handle"))
            for r in self.data.get("routes") or []
        )
        state_path = (self.data.get("state") or {}).get("path") or str(self.merged.config_dir / DEFAULT_DB_NAME)
        roots: list[Path] = []
        for root in self.data.get("plugin_roots") or []:
            if Path(root) not in roots:
                roots.append(Path(root))
        api = api_config(self.data.get("api") or {})
        webhooks = webhooks_config(self.data.get("webhooks") or {})
        if self.problems:
            raise ConfigError(self.problems)
        return GatewayConfig(
            config_dir=self.merged.config_dir,
            state_path=Path(state_path),
            service=service,
            plugin_roots=tuple(roots),
            plugins=MappingProxyType(plugins),
            routes=routes,
            pipelines=freeze(self.data.get("pipelines") or []),
            api=api,
            webhooks=webhooks,
            document=freeze(self.data),
            files=tuple(self.merged.files),
            env_files=tuple(self.merged.env_files),
            warnings=tuple(self.merged.warnings),
            merged=self.merged,
        )

    def _duration(self, path: KeyPath, raw: Any, default: float) -> float:
        if raw is None:
            return default
        try:
            return parse_duration(raw)
        except ValueError as exc:
            self.problems.append(self.merged.problem(path, str(exc)))
            return default

    def _positive_duration(self, path: KeyPath, raw: Any) -> float:
        before = len(self.problems)
        value = self._duration(path, raw, 0.0)
        if value <= 0 and len(self.problems) == before:
            self.problems.append(self.merged.problem(path, f"timeout must be positive, got {raw!r}"))
        return value

    def _service(self) -> ServiceConfig:
        raw = self.data.get("service") or {}
        base = ServiceConfig()
        p = ("service",)
        job_log_retention = self._duration(
            (*p, "job_log_retention"), raw.get("job_log_retention"), base.job_log_retention
        )
        service = ServiceConfig(
            name=raw.get("name", base.name),
            tick_interval=self._duration((*p, "tick_interval"), raw.get("tick_interval"), base.tick_interval),
            log_level=str(raw.get("log_level", base.log_level)).lower(),
            log_format=raw.get("log_format", base.log_format),
            dedupe_ttl=self._duration((*p, "dedupe_ttl"), raw.get("dedupe_ttl"), base.dedupe_ttl),
            job_log_retention=job_log_retention,
            job_queue_retention=self._duration(
                (*p, "job_queue_retention"), raw.get("job_queue_retention"), base.job_queue_retention
            ),
            job_transitions_retention=self._duration(
                (*p, "job_transitions_retention"), raw.get("job_transitions_retention"), job_log_retention
            ),
            job_attempts_retention=self._duration(
                (*p, "job_attempts_retention"), raw.get("job_attempts_retention"), job_log_retention
            ),
            breaker_transitions_retention=self._duration(
                (*p, "breaker_transitions_retention"),
                raw.get("breaker_transitions_retention"),
                base.breaker_transitions_retention,
            ),
            max_workers=raw.get("max_workers", base.max_workers),
            strict_mode=self.gates.strict,
            allow_symlinks=raw.get("allow_symlinks", False),
            plugin_env_passthrough=tuple(raw.get("plugin_env_passthrough") or ()),
            # 0 is the original's "use the default", not "no hooks" (its P2-11).
            hook_max_depth=raw.get("hook_max_depth") or base.hook_max_depth,
            lease_ttl=self._duration((*p, "lease_ttl"), raw.get("lease_ttl"), base.lease_ttl),
            backup=self._backup(raw.get("backup")),
            admission=self.gates,
            worker_groups=self._worker_group_map(raw.get("worker_groups")),
            sandbox=sandbox_defaults(raw),
        )
        if service.job_queue_retention < service.dedupe_ttl:
            self.problems.append(
                self.merged.problem(
                    (*p, "job_queue_retention"),
                    "job_queue_retention must be at least dedupe_ttl (dedupe reads recent terminal job_queue rows)",
                )
            )
        if service.tick_interval < MIN_TICK_INTERVAL:
            self.problems.append(
                self.merged.problem(
                    (*p, "tick_interval"),
                    f"tick_interval {format_duration(service.tick_interval)} is below the minimum "
                    f"{format_duration(MIN_TICK_INTERVAL)}: a tighter tick floods dispatch",
                )
            )
        if service.lease_ttl < 5:
            self.problems.append(self.merged.problem((*p, "lease_ttl"), "lease_ttl must be at least 5s"))
        return service

    def _worker_group_map(self, raw: Any) -> Mapping[str, tuple[str, ...]]:
        # Only what has the schema's shape: the schema's own problems say what else is wrong.
        if not isinstance(raw, dict):
            return MappingProxyType({})
        return MappingProxyType(
            {
                str(group): tuple(name for name in members if isinstance(name, str))
                for group, members in raw.items()
                if isinstance(members, list)
            }
        )

    def _worker_groups(self, service: ServiceConfig, plugins: Mapping[str, PluginConfig]) -> None:
        """A group's workers would wait forever for jobs of a plugin no config defines: each name
        must be a configured plugin, or an internal hop (`if:` switches, `relay:` sends)."""
        for group, members in service.worker_groups.items():
            for index, name in enumerate(members):
                if name not in plugins and name not in (SWITCH, RELAY):
                    configured = ", ".join(sorted(plugins)) or "none"
                    self.problems.append(
                        self.merged.problem(
                            ("service", "worker_groups", group, index),
                            f"worker group {group!r} names {name!r}, which is not a configured plugin "
                            f"(configured: {configured}; {SWITCH} and {RELAY} are the internal hops)",
                        )
                    )

    def _backup(self, raw: Any) -> BackupPolicy | None:
        if not isinstance(raw, dict) or not isinstance(raw.get("schedule"), str) or "directory" not in raw:
            return None  # absent, or refused by the schema already
        p: KeyPath = ("service", "backup")
        cadence = self._cadence((*p, "schedule"), raw["schedule"])
        # Relative to the file that says it, as the loader resolves every path.
        origin = self.merged.origin_of((*p, "directory"))
        base = origin.file.parent if origin else self.merged.config_dir
        directory = Path(os.path.expanduser(str(raw["directory"])))
        return BackupPolicy(
            schedule=raw["schedule"],
            cadence=cadence or BackupCadence("daily"),
            directory=directory if directory.is_absolute() else (base / directory).resolve(),
            keep=raw.get("keep", BackupPolicy.keep),
            scope=raw.get("scope", BackupPolicy.scope),
        )

    def _cadence(self, path: KeyPath, text: str) -> BackupCadence | None:
        value = text.strip()
        if value.lower() in ("hourly", "daily", "weekly"):
            return BackupCadence(value.lower())
        if len(value.split()) == 5:
            from croniter import croniter  # why here: see gateway.config.schedules, _cron

            if croniter.is_valid(value):
                return BackupCadence("cron", cron=" ".join(value.split()))
            self.problems.append(self.merged.problem(path, f"invalid cron expression {text!r}"))
            return None
        try:
            seconds = parse_duration(value)
        except ValueError:
            self.problems.append(
                self.merged.problem(
                    path,
                    f"expected a cron expression (5 fields, evaluated in UTC), an interval such as 6h, "
                    f"or hourly, daily or weekly; got {text!r}",
                )
            )
            return None
        if seconds % 60 or not 1 <= seconds // 60 <= MAX_BACKUP_MINUTES:
            self.problems.append(
                self.merged.problem(
                    path,
                    f"an interval must be whole minutes from 1m to {MAX_BACKUP_MINUTES}m (about 22 days), "
                    f"got {text!r}; use a cron expression for anything longer",
                )
            )
            return None
        return BackupCadence("minutes", minutes=int(seconds // 60))

    def _plugin(self, name: str, raw: Mapping[str, Any], service: ServiceConfig) -> PluginConfig:
        p: KeyPath = ("plugins", name)
        timeouts: dict[str, float] = {}
        if raw.get("timeout") is not None:
            # `timeout:` is every command's deadline; `timeouts:` then overrides single commands.
            single = self._positive_duration((*p, "timeout"), raw["timeout"])
            timeouts = {cmd: single for cmd in DEFAULT_TIMEOUTS}
            timeouts["*"] = single
        for command, value in (raw.get("timeouts") or {}).items():
            timeouts[command] = self._positive_duration((*p, "timeouts", command), value)
        retry_raw = raw.get("retry") or {}
        retry = RetryPolicy(
            max_attempts=retry_raw.get("max_attempts", raw.get("max_attempts", RetryPolicy.max_attempts)),
            backoff_base=self._duration((*p, "retry", "backoff_base"), retry_raw.get("backoff_base"), 30.0),
        )
        parallelism = raw.get("parallelism")
        # One node (SQLite) runs at most max_workers at once; nodes sharing a PostgreSQL ledger
        # add theirs, so only what one node runs (node_parallelism) is bounded by its slots.
        if parallelism is not None and parallelism > service.max_workers and not self.merged.shared_ledger:
            self.problems.append(
                self.merged.problem(
                    (*p, "parallelism"),
                    f"parallelism {parallelism} exceeds service.max_workers {service.max_workers}"
                    " (must be between 1 and max_workers on one node; with DATABASE_URL it is the cap"
                    " across every node)",
                )
            )
        node_parallelism = raw.get("node_parallelism")
        if node_parallelism is not None and node_parallelism > service.max_workers:
            self.problems.append(
                self.merged.problem(
                    (*p, "node_parallelism"),
                    f"node_parallelism {node_parallelism} exceeds service.max_workers {service.max_workers}"
                    " (a node runs at most max_workers jobs at once)",
                )
            )
        cb_raw = raw.get("circuit_breaker") or {}
        if "schedule" in raw:
            # The original refuses its own legacy single `schedule:` too; ignoring it would leave
            # a plugin the operator thinks is scheduled never running.
            self.problems.append(
                self.merged.problem(
                    (*p, "schedule"),
                    "`schedule:` is no longer supported; use `schedules:`, a list of entries "
                    "(schedules: [{every: 5m}])",
                )
            )
        schedules = parse_schedules(name, raw.get("schedules"), self.merged.problem)
        self.problems.extend(schedules.problems)
        self.merged.warnings.extend(schedules.warnings)
        origin = self.merged.origin_of(p)
        sandbox = plugin_sandbox(raw.get("sandbox"), service.sandbox)
        if sandbox.egress and sandbox.network != EGRESS:
            self.problems.append(
                self.merged.problem(
                    (*p, "sandbox", "egress"),
                    f"egress lists hosts but network is {sandbox.network!r}: "
                    "they are reached only with network: egress",
                )
            )
        return PluginConfig(
            name=name,
            uses=raw.get("uses") or name,
            enabled=raw.get("enabled", True),
            config=freeze(raw.get("config") or {}),
            parallelism=parallelism,
            node_parallelism=node_parallelism,
            timeouts=freeze(timeouts),
            retry=retry,
            notify_on_complete=raw.get("notify_on_complete", False),
            schedules=schedules.entries,
            max_outstanding_polls=raw.get("max_outstanding_polls", 1),
            circuit_breaker=CircuitBreakerPolicy(
                threshold=cb_raw.get("threshold", 3),
                reset_after=self._duration((*p, "circuit_breaker", "reset_after"), cb_raw.get("reset_after"), 1800.0),
            ),
            source=origin.file if origin else None,
            sandbox=sandbox,
            own_sandbox=raw.get("sandbox") is not None,
        )
