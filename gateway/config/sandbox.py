"""`sandbox:` (per plugin) and `service.sandbox_default` / `service.sandbox_limits` / `service.sandbox_user`
as typed values: what a plugin process may touch (docs/sandbox.md).

The schema (config.schema.json) has checked every key, type, enum and pattern, and refused the
document with file, line and key; this module only types what passed and merges the layers:
built-in limits <- `service.sandbox_limits` <- the plugin's `sandbox.limits`, key by key; the
plugin's `network`, `filesystem` and `user` where it sets them, else the gateway's default profile.
Whether this host can enforce a profile is decided as the runtime is built
(gateway.plugins.sandboxing), never here: the config layer reads files only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gateway.config.durations import parse_duration
from gateway.config.webhooks import parse_size

HOST = "host"
NONE = "none"
EGRESS = "egress"
STRICT = "strict"
UNLIMITED = "unlimited"


def physical_memory() -> int:
    """The machine's RAM in bytes: the default memory limit."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@dataclass(frozen=True)
class Limits:
    """Resource limits set on the plugin's process right after its spawn (soft = hard); None is no limit.

    `memory` is RLIMIT_DATA, not RLIMIT_AS: since Linux 4.7 DATA counts the private writable
    mappings (heap, anonymous mmap) a process has made usable, while AS counts every reservation,
    and Go, the JVM, V8 and ASan reserve tens of GB of address space up front (PROT_NONE) that they
    never touch: an AS limit low enough to matter stops them at start.

    Its default is the machine's RAM, not a fixed size: the limit lands a moment after the spawn,
    and Bun (JavaScriptCore) reserves a quarter of the RAM as writable memory within its first
    ~10-20 ms. A limit under that which lands later (a busy daemon's spawning thread) finds the
    reservation made and Bun aborts at its next allocation (4 GB did, on a 25 GB machine under
    load); one that lands first only makes Bun reserve less. No plugin is held back by a limit
    of all the RAM, and a runaway one still stops before it takes the machine's swap."""

    memory: int | None = field(default_factory=physical_memory)  # bytes
    cpu: int | None = 3600  # seconds of CPU time (SIGXCPU, then SIGKILL a second later)
    open_files: int | None = 8192
    file_size: int | None = 32 * 1024**3  # bytes: the largest file it may write
    # RLIMIT_NPROC counts every process of the plugin's uid, and the kernel never applies it to
    # root: it binds only a plugin running as a dedicated `user:`.
    processes: int | None = 4096


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class Sandbox:
    """The profile one plugin runs under."""

    network: str = HOST  # host | none | egress
    egress: tuple[str, ...] = ()  # host, host:port or *.domain, for network: egress
    filesystem: str = HOST  # host | strict
    writable: tuple[Path, ...] = ()  # for filesystem: strict
    user: str | None = None  # name, uid or uid:gid the plugin runs as (the daemon must be root)
    limits: Limits = DEFAULT_LIMITS

    @property
    def isolated(self) -> bool:
        """Whether anything beyond the limits is asked for (a namespace, bwrap, another uid)."""
        return self.network != HOST or self.filesystem != HOST or self.user is not None

    def describe(self) -> str:
        """One line, as the ledger records it on each attempt and the console and `job inspect` show it."""
        parts = [f"network={self.network}"]
        if self.network == EGRESS:
            parts[0] += "[" + ",".join(self.egress) + "]"
        parts.append(f"filesystem={self.filesystem}")
        if self.filesystem == STRICT and self.writable:
            parts[-1] += "[writable:" + ",".join(map(str, self.writable)) + "]"
        if self.user is not None:
            parts.append(f"user={self.user}")
        limits = self.limits
        shown = {
            "memory": size_text(limits.memory),
            "cpu": f"{limits.cpu}s" if limits.cpu is not None else UNLIMITED,
            "files": str(limits.open_files) if limits.open_files is not None else UNLIMITED,
            "fsize": size_text(limits.file_size),
            "nproc": str(limits.processes) if limits.processes is not None else UNLIMITED,
        }
        parts.append("limits=" + ",".join(f"{k}:{v}" for k, v in shown.items()))
        return " ".join(parts)


def size_text(value: int | None) -> str:
    """A limit in bytes as the profile line shows it: exact in its largest whole unit, or in GB to
    one decimal when over a GB and not whole (the default memory limit, the machine's RAM)."""
    if value is None:
        return UNLIMITED
    for unit, size in (("GB", 1024**3), ("MB", 1024**2)):
        if value % size == 0:
            return f"{value // size}{unit}"
    if value >= 1024**3:
        return f"{value / 1024**3:.1f}GB"
    return f"{value // 1024}KB" if value % 1024 == 0 else f"{value}B"


@dataclass(frozen=True)
class SandboxDefaults:
    """The gateway-wide part, from `service`: the profile of every plugin without its own `sandbox:`."""

    profile: str = HOST  # host | strict
    limits: Limits = DEFAULT_LIMITS
    user: str | None = None

    def sandbox(self) -> Sandbox:
        if self.profile == STRICT:
            return Sandbox(network=NONE, filesystem=STRICT, user=self.user, limits=self.limits)
        return Sandbox(user=self.user, limits=self.limits)


def sandbox_defaults(service: Mapping[str, Any]) -> SandboxDefaults:
    """`service`'s raw mapping, which the schema has passed."""
    return SandboxDefaults(
        profile=service.get("sandbox_default", HOST),
        limits=limits(service.get("sandbox_limits") or {}, DEFAULT_LIMITS),
        user=_user(service.get("sandbox_user")),
    )


def plugin_sandbox(raw: Mapping[str, Any] | None, defaults: SandboxDefaults) -> Sandbox:
    """A plugin's `sandbox:` (None when it has none) over the gateway's default profile: a key the
    plugin leaves out keeps the default's value, so `sandbox: {writable: [...]}` under
    `sandbox_default: strict` stays strict."""
    base = defaults.sandbox()
    if not raw:
        return base
    network = raw.get("network", EGRESS if raw.get("egress") else base.network)
    return replace(
        base,
        network=network,
        egress=tuple(raw.get("egress") or ()),
        filesystem=raw.get("filesystem", base.filesystem),
        writable=tuple(Path(p) for p in raw.get("writable") or ()),
        user=_user(raw["user"]) if "user" in raw else base.user,
        limits=limits(raw.get("limits") or {}, base.limits),
    )


def limits(raw: Mapping[str, Any], base: Limits) -> Limits:
    """`raw` (a `limits:` mapping) over `base`, key by key; `unlimited` lifts a limit."""
    return Limits(
        memory=_limit(raw, "memory", base.memory, parse_size),
        cpu=_limit(raw, "cpu", base.cpu, lambda v: max(1, round(parse_duration(v)))),
        open_files=_limit(raw, "open_files", base.open_files, int),
        file_size=_limit(raw, "file_size", base.file_size, parse_size),
        processes=_limit(raw, "processes", base.processes, int),
    )


def _limit(raw: Mapping[str, Any], key: str, base: int | None, parse: Any) -> int | None:
    if key not in raw:
        return base
    value = raw[key]
    if value == UNLIMITED:
        return None
    return int(parse(value))


def _user(value: Any) -> str | None:
    return None if value is None else str(value)
