"""`system doctor`: what is wrong, or will go wrong, with a config that loads (Operator
Handbook: "Startup and runtime health checks"). Pure over a loaded runtime, no I/O.

Load-time problems refuse the config outright (exit 78, `config check`); the doctor looks for
what loads but cannot work as meant: an enabled plugin that was skipped (not discovered, its
interpreter missing, or a required config key missing), an alias that names another alias (a
chain, or a cycle), routes that loop, a token scope naming a plugin that is not configured,
plugins discovered but never configured (or unable to run here) or configured but never
triggered, and a webhook listener sharing the API's address.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.config.tokens import RESOURCES
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


def diagnose(runtime: Runtime) -> list[Finding]:
    doctor = _Doctor(runtime)
    for check in (
        doctor.skipped_plugins,
        doctor.alias_chains,
        doctor.route_cycles,
        doctor.token_scopes,
        doctor.unused_plugins,
        doctor.webhook_conflicts,
        doctor.relay_ingress,
    ):
        check()
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
            if manifest is not None and manifest.cannot_run:
                check = "interpreter_missing"
            elif "missing required config keys" in reason:
                check = "required_config_missing"
            else:
                check = "plugin_not_discovered"
            self.add(check, ERROR, f"plugin {name!r} is enabled but cannot run: {reason}", ("plugins", name))

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

    def token_scopes(self) -> None:
        configured = set(self.config.plugins)
        for token in self.runtime.tokens.tokens:
            for scope in sorted(token.scopes):
                name, _, access = scope.partition(":")
                if access in ("ro", "rw") and name not in RESOURCES and name not in configured:
                    self.add(
                        "scope_unknown_plugin",
                        WARNING,
                        f"token {token.name!r} has scope {scope!r}, but no plugin {name!r} is configured",
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
