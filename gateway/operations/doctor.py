"""`system doctor`: what is wrong, or will go wrong, with a config that loads (Operator
Handbook: "Startup and runtime health checks"). Pure over a loaded runtime, no I/O.

Load-time problems refuse the config outright (exit 78, `config check`); the doctor looks for
what loads but cannot work as meant: an enabled plugin that was skipped (not discovered, its
interpreter missing, or a required config key missing), an alias that names another alias (a
chain, or a cycle), routes that loop, a token scope naming a plugin that is not configured,
plugins discovered but never configured (or unable to run here) or configured but never
triggered, a webhook listener sharing the API's address, a tick under a second, an alias whose
target is in no plugin root, on-hook pipelines of notify_on_complete plugins that run each other
in a loop, a token scope allowing or denying a command its plugin does not have, a plugin whose
sandbox this host cannot enforce, and one left on the host's network and filesystem under
`sandbox_default: strict`. Given the
cluster as the ledger has it (read by the caller), also the plugins whose queued jobs no live
node runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.config.durations import format_duration
from gateway.config.model import RECOMMENDED_TICK_INTERVAL
from gateway.config.sandbox import HOST, STRICT
from gateway.config.tokens import ADMIN, FINER, RESOURCES
from gateway.plugins.registry import UNCONFINABLE
from gateway.reports.nodes import NodesReport
from gateway.runtime import Runtime

ERROR, WARNING, INFO = "error", "warning", "info"


# A finding's severity as a check's status in the original's /system/doctor shape.
_STATUS = {ERROR: "fail", WARNING: "warn", INFO: "ok"}


@dataclass(frozen=True)
class Finding:
    check: str
    severity: str
    message: str
    where: str | None = None
    key: str | None = None  # the config key it is about, dotted (`plugins.ghost`)

    def as_dict(self) -> dict[str, Any]:
        return {"check": self.check, "severity": self.severity, "message": self.message, "where": self.where}

    def as_check(self) -> dict[str, Any]:
        return {"name": self.check, "status": _STATUS[self.severity], "detail": self.message, "field": self.key}


def diagnose(runtime: Runtime, nodes: NodesReport | None = None) -> list[Finding]:
    """`nodes`: the cluster as the ledger has it (gateway.reports.nodes), read by the caller; None
    when the ledger could not be read, and the unserved-plugin check is left out."""
    doctor = _Doctor(runtime)
    for check in (
        doctor.service_tick,
        doctor.skipped_plugins,
        doctor.sandbox_holes,
        doctor.alias_chains,
        doctor.route_cycles,
        doctor.hook_cycles,
        doctor.token_scopes,
        doctor.unused_plugins,
        doctor.webhook_conflicts,
        doctor.relay_ingress,
    ):
        check()
    if nodes is not None:
        doctor.unserved_plugins(nodes)
    return doctor.findings


class _Doctor:
    def __init__(self, runtime: Runtime):
        self.runtime = runtime
        self.config = runtime.config
        self.findings: list[Finding] = []

    def add(self, check: str, severity: str, message: str, path: tuple[str | int, ...] | None = None) -> None:
        where = key = None
        if path is not None:
            problem = self.config.problem(path, "")
            key = problem.key
            where = f"{problem.file}" + (f":{problem.line}" if problem.line else "") + f" key {key}"
        self.findings.append(Finding(check, severity, message, where, key))

    def unserved_plugins(self, nodes: NodesReport) -> None:
        """Queued jobs that no live node claims wait without a word until one that runs their
        plugin starts: a group or --plugins that leaves it out, or no worker node at all."""
        if not nodes.unserved:
            return
        live = nodes.live_workers
        if not live:
            who = "no worker node is live"
        else:
            who = "the live nodes claim only " + "; ".join(
                f"{node['hostname']} pid {node['pid']}"
                + (f" (group {node['group']})" if node["group"] else "")
                + f": {', '.join(node['plugins'] or ())}"
                for node in live
            )
        path = ("service", "worker_groups") if self.config.service.worker_groups else None
        for waiting in nodes.unserved:
            jobs = f"{waiting['queued']} queued job" + ("s" if waiting["queued"] != 1 else "")
            self.add(
                "unserved_plugin",
                WARNING,
                f"plugin {waiting['plugin']!r} has {jobs} (the oldest since {waiting['oldest_queued_at']}) that no "
                f"live node runs: {who}; start workers that run it (runworkers without --group or --plugins, or "
                "with a group of service.worker_groups naming it)",
                path,
            )

    def service_tick(self) -> None:
        """Past the load's 100ms floor, a tick under a second still makes polls chatty."""
        tick = self.config.service.tick_interval
        if tick < RECOMMENDED_TICK_INTERVAL:
            self.add(
                "tick_interval_short",
                WARNING,
                f"tick_interval {format_duration(tick)} is below the recommended "
                f"{format_duration(RECOMMENDED_TICK_INTERVAL)}: chatty service polls can flood dispatch",
                ("service", "tick_interval"),
            )

    def skipped_plugins(self) -> None:
        manifests = self.runtime.registry.discovery.manifests
        for name, reason in self.runtime.registry.skipped.items():
            plugin = self.config.plugins[name]
            if not plugin.enabled:
                continue
            for problem in self.runtime.registry.refusals.get(name, ()):  # its config_schema's verdict
                where = f"{problem.file}" + (f":{problem.line}" if problem.line else "") + f" key {problem.key}"
                message = f"plugin {name!r} is enabled but cannot run: {problem.message}"
                self.findings.append(Finding("plugin_config_invalid", ERROR, message, where, problem.key))
            if name in self.runtime.registry.refusals:
                continue
            manifest = manifests.get(plugin.uses)
            if reason.startswith(UNCONFINABLE):
                self.add(
                    "sandbox_unenforceable",
                    ERROR,
                    f"plugin {name!r} is enabled but cannot run: {reason}",
                    ("plugins", name, "sandbox") if plugin.own_sandbox else ("service", "sandbox_default"),
                )
                continue
            if manifest is not None and manifest.cannot_run:
                check = "interpreter_missing"
            elif "missing required config keys" in reason:
                check = "required_config_missing"
            elif plugin.uses != name and plugin.uses not in self.config.plugins:
                # An alias whose target is in no plugin root: the `uses:` line is what to fix.
                self.add(
                    "alias_target_missing",
                    ERROR,
                    f"alias {name!r} is enabled but cannot run: it uses {plugin.uses!r}, which is not a plugin "
                    f"in the plugin roots ({reason})",
                    ("plugins", name, "uses"),
                )
                continue
            else:
                check = "plugin_not_discovered"
            self.add(check, ERROR, f"plugin {name!r} is enabled but cannot run: {reason}", ("plugins", name))

    def sandbox_holes(self) -> None:
        """Under `sandbox_default: strict`, a plugin whose own `sandbox:` puts it back on the host's
        network and filesystem is the one an auditor should look at first."""
        if self.config.service.sandbox.profile != STRICT:
            return
        for name, plugin in self.config.plugins.items():
            sandbox = plugin.sandbox
            if plugin.enabled and sandbox.network == HOST and sandbox.filesystem == HOST:
                self.add(
                    "sandbox_host_under_strict",
                    WARNING,
                    f"plugin {name!r} runs with the host's network and filesystem while service.sandbox_default "
                    "is strict: its own sandbox: says so",
                    ("plugins", name, "sandbox"),
                )

    def alias_chains(self) -> None:
        """`uses:` names a plugin in the roots; an alias of an alias is never followed."""
        plugins = self.config.plugins
        for name, plugin in plugins.items():
            seen = [name]
            target = plugin.uses
            while target in plugins and plugins[target].uses != target and target not in seen:
                seen.append(target)
                target = plugins[target].uses
            if len(seen) == 1:
                continue
            chain = " -> ".join([*seen, target])
            if target in seen:
                message = f"alias cycle: {chain}"
            else:
                message = f"alias {name!r} uses the alias {seen[1]!r} ({chain}); `uses:` must name a plugin itself"
            self.add("alias_cycle", ERROR, message, ("plugins", name, "uses"))

    def route_cycles(self) -> None:
        """Routes whose events lead back to their source loop until the depth guard stops them."""
        edges: dict[str, set[str]] = {}
        for route in self.config.routes:
            edges.setdefault(route.source, set()).add(route.target)
        reported: set[frozenset[str]] = set()
        for start in sorted(edges):
            for cycle in _cycles_from(start, edges):
                key = frozenset(cycle)
                if key not in reported:
                    reported.add(key)
                    text = " -> ".join([*cycle, cycle[0]])
                    self.add(
                        "route_cycle",
                        WARNING,
                        f"routes form a loop ({text}); each pass runs until the hop limit (20) stops it",
                        ("routes",),
                    )

    def hook_cycles(self) -> None:
        """Plugins with `notify_on_complete` whose on-hook pipelines run each other again (A's
        completion starts a pipeline that runs B, B's one that runs A): a loop only
        `hook_max_depth` stops. A target without notify_on_complete fires no hook, so ends a chain."""
        plugins = self.config.plugins
        notifying = {n for n, p in plugins.items() if p.enabled and p.notify_on_complete}
        edges: dict[str, set[str]] = {}
        for pipeline in self.runtime.pipelines.pipelines.values():
            if not pipeline.is_hook:
                continue
            targets = {node.plugin for node in pipeline.nodes.values() if node.plugin in notifying}
            for source in notifying if pipeline.from_plugin is None else {pipeline.from_plugin} & notifying:
                edges.setdefault(source, set()).update(targets)
        reported: set[frozenset[str]] = set()
        for start in sorted(edges):
            for cycle in _cycles_from(start, edges):
                if frozenset(cycle) not in reported:
                    reported.add(frozenset(cycle))
                    text = " -> ".join([*cycle, cycle[0]])
                    self.add(
                        "hook_cycle",
                        WARNING,
                        f"on-hook pipelines of notify_on_complete plugins loop ({text}); each pass runs until "
                        f"hook_max_depth ({self.config.service.hook_max_depth}) stops it",
                        ("plugins", cycle[0], "notify_on_complete"),
                    )

    def token_scopes(self) -> None:
        configured = set(self.config.plugins)
        registry = self.runtime.registry
        for token in self.runtime.tokens.tokens:
            for scope in sorted(token.scopes):
                name, _, access = scope.partition(":")
                if access in ("ro", "rw") and name not in RESOURCES and name not in configured:
                    self.add(
                        "scope_unknown_plugin",
                        WARNING,
                        f"token {token.name!r} has scope {scope!r}, but no plugin {name!r} is configured",
                    )
                if not recognised(scope):
                    # A typo (`jobs:stauts:ro`) grants nothing and fails closed, but the token's
                    # holder is then refused with no hint why; `config token create` refuses it.
                    self.add(
                        "scope_unrecognised",
                        WARNING,
                        f"token {token.name!r} has scope {scope!r}, which grants nothing: a scope is *, "
                        f"RESOURCE:ro|rw, PLUGIN:ro|rw, PLUGIN:allow|deny:COMMAND or one of {', '.join(FINER)}",
                    )
                    continue
                rule, _, command = access.partition(":")
                instance = registry.instances.get(name) or registry.disabled.get(name)
                if (
                    rule in ("allow", "deny")
                    and command != "*"
                    and instance
                    and command not in instance.manifest.commands
                ):
                    # The original's command scopes (`PLUGIN:allow:CMD`, `PLUGIN:deny:CMD`): an
                    # allow of a command that does not exist grants nothing, a deny denies nothing.
                    self.add(
                        "scope_unknown_command",
                        ERROR if rule == "allow" else WARNING,
                        f"token {token.name!r} has scope {scope!r}, but plugin {name!r} has no command {command!r} "
                        f"(it has: {', '.join(instance.manifest.commands)})"
                        + (" (deny is a no-op)" if rule == "deny" else ""),
                    )
        for problem in self.runtime.tokens.problems:
            self.add("token_refused", ERROR, problem)

    def unused_plugins(self) -> None:
        registry = self.runtime.registry
        used = {p.uses for p in self.config.plugins.values()}
        for name in sorted(set(registry.discovery.manifests) - used):
            reason = registry.discovery.manifests[name].cannot_run
            if reason:
                self.add("interpreter_missing", INFO, f"plugin {name!r} is discovered but cannot run here: {reason}")
            else:
                self.add(
                    "unused_plugin", INFO, f"plugin {name!r} is discovered but not configured (add it under plugins:)"
                )
        triggered = {s.plugin for s in self.config.scheduled_entries()}
        triggered |= {r.target for r in self.config.routes}
        for pipeline in self.runtime.pipelines.pipelines.values():
            triggered |= {node.plugin for node in pipeline.nodes.values() if node.plugin}
        triggered |= {endpoint.plugin for endpoint in self.runtime.webhooks.by_path.values()}
        for name in sorted(set(registry.instances) - triggered):
            self.add(
                "untriggered_plugin",
                INFO,
                f"plugin {name!r} has no schedule, route, pipeline step or webhook: only API and CLI calls run it",
                ("plugins", name),
            )

    def webhook_conflicts(self) -> None:
        listen, api = self.runtime.webhooks.listen, self.config.api
        if listen is not None and api.enabled and listen.port == api.listen.port:
            self.add(
                "webhook_listen_conflict",
                ERROR,
                f"webhooks.listen {str(listen)!r} and api.listen share port {listen.port}: one of them cannot start",
                ("webhooks", "listen"),
            )

    def relay_ingress(self) -> None:
        """A relayed event is accepted and starts the pipelines whose `on:` is its type: a peer
        allowed an event type no pipeline takes gets its events accepted and nothing done."""
        relay = self.runtime.relay
        if relay is None or relay.ingress is None:
            return
        taken = {p.trigger for p in self.runtime.pipelines.pipelines.values() if not p.is_hook}
        written = [str(p.get("name", "")).strip() for p in self.config.document["remote_ingress"].get("peers") or []]
        for peer in relay.ingress.peers.values():
            index = written.index(peer.name)
            for event_type in sorted(peer.accept - taken):
                self.add(
                    "relay_accept_unrouted",
                    WARNING,
                    f"relay peer {peer.name!r} may send {event_type!r}, but no pipeline has on: {event_type}: "
                    "such events are accepted and start nothing",
                    ("remote_ingress", "peers", index, "accept"),
                )
        if not relay.ingress.peers:
            self.add(
                "relay_no_peers",
                WARNING,
                "remote_ingress lists no enabled peer: every relayed event is refused",
                ("remote_ingress",),
            )


def _cycles_from(start: str, edges: dict[str, set[str]]) -> list[list[str]]:
    """Simple cycles through `start` (small graphs: every path is walked once)."""
    found: list[list[str]] = []
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    while stack:
        node, path = stack.pop()
        for nxt in sorted(edges.get(node, ())):
            if nxt == start:
                found.append(path)
            elif nxt not in path:
                stack.append((nxt, [*path, nxt]))
    return found


def recognised(scope: str) -> bool:
    """Whether `scope` is a form the API's checks can grant something by."""
    if scope == ADMIN or scope in FINER:
        return True
    parts = scope.split(":")
    if len(parts) == 2:
        return bool(parts[0]) and parts[1] in ("ro", "rw")
    return len(parts) == 3 and bool(parts[0]) and parts[1] in ("allow", "deny") and bool(parts[2])
