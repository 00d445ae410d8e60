"""`plugin list [--api-url URL]`, `plugin manifest NAME`, `plugin run NAME` and `plugin lock NAME... | --all`."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from django.core.management.base import CommandParser

from gateway import intake
from gateway.cli.base import EXIT_CONFIG, EXIT_FAILED, EXIT_USAGE, DuctileCommand, Exit, json_object
from gateway.cli.nouns import NOUNS
from gateway.config.frozen import thaw
from gateway.config.integrity import SealUnusable
from gateway.config.sandbox import EGRESS
from gateway.plugins.manifest import Manifest
from gateway.plugins.seal import lock_plugins
from gateway.reports import latest_result, ts
from gateway.runtime import RUNTIME, Runtime
from gateway.terminal import one_line
from ledger.ids import new_id
from ledger.models import EgressHost, Job, PluginInstanceRecord, WorkerInstance
from ledger.models.workers import CLI
from ledger.submitters import Submitter


# What one action alone uses is imported in it (`plugin list` is an agent's every few minutes): the
# executor (`run`), the API client (`--api-url`), and the config command's report (`lock`), which
# loads the backups' modules.
class Command(DuctileCommand):
    help = NOUNS["plugin"].summary

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        listing = actions.add_parser("list", help="discovered and configured plugins")
        listing.add_argument(
            "--check",
            action="store_true",
            help="run each enabled plugin's health command first (as `plugin run NAME --command health`)",
        )
        listing.add_argument(
            "--api-url", help="list the plugins a running gateway has loaded (its GET /plugins), not this config's"
        )
        listing.add_argument(
            "--api-key", help="bearer token for --api-url (default: $DUCTILE_API_KEY, $DUCTILE_TOKEN, else none)"
        )
        self.add_json(listing)
        manifest = actions.add_parser("manifest", help="a plugin's manifest as loaded: commands, schemas, config keys")
        manifest.add_argument("name", help="configured plugin or alias, or a discovered plugin")
        self.add_json(manifest)
        run = actions.add_parser("run", help="enqueue one command and run it here (or leave it to the daemon)")
        run.add_argument("name", help="plugin or alias name")
        run.add_argument("--command", default="poll", help="command to run (default: poll)")
        payload = run.add_mutually_exclusive_group()
        payload.add_argument("--payload", help="JSON object passed as event.payload")
        payload.add_argument("--payload-file", help="file holding the JSON payload")
        run.add_argument("--dedupe-key", help="dedupe key for this enqueue")
        run.add_argument("--no-wait", action="store_true", help="enqueue only; a running daemon picks it up")
        run.add_argument("--dry-run", action="store_true", help="check and show the job; enqueue nothing")
        run.add_argument(
            "--api-url", help="enqueue through a running gateway's POST /plugin/NAME/COMMAND instead (it runs it)"
        )
        run.add_argument("--api-key", help="bearer token for --api-url (default: $DUCTILE_API_KEY, $DUCTILE_TOKEN)")
        self.add_json(run)
        lock = actions.add_parser(
            "lock", help="authorize these plugins' code as it is now: record their fingerprints in .checksums"
        )
        lock.add_argument("names", nargs="*", metavar="NAME", help="configured plugin (or a discovered one, to add)")
        lock.add_argument("--all", action="store_true", help="every configured plugin")
        lock.add_argument("--dry-run", action="store_true", help="show what would be recorded; write nothing")
        self.add_json(lock)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "list" and (options["api_url"] or options["api_key"]):
            self.list_remote(options)
        elif options["action"] == "list":
            self.list_plugins(options)
        elif options["action"] == "manifest":
            self.show_manifest(options["name"])
        elif options["action"] == "run" and (options["api_url"] or options["api_key"]):
            self.run_remote(options)
        elif options["action"] == "lock":
            self.lock_plugins(options)
        else:
            self.run_plugin(options)

    # -- plugin lock ---------------------------------------------------------------------------

    def lock_plugins(self, options: dict[str, Any]) -> None:
        """Only the named plugins' fingerprints change: authorizing one plugin's edit never blesses
        another's, or a config file's (`config lock` re-seals everything)."""
        names = options["names"]
        if bool(names) == options["all"]:
            raise Exit(EXIT_USAGE, "name the plugins to lock, or give --all")
        from gateway.management.commands.config import emit_lock_report

        config_dir = RUNTIME.config_dir or Path(os.environ["DUCTILE_CONFIG_DIR"])
        try:
            report, notes = lock_plugins(config_dir, None if options["all"] else names, dry_run=options["dry_run"])
        except SealUnusable as exc:
            raise Exit(EXIT_CONFIG, str(exc)) from exc
        emit_lock_report(self, report, notes, options["dry_run"])

    # -- plugin manifest -----------------------------------------------------------------------

    def show_manifest(self, name: str) -> None:
        registry = self.runtime().registry
        instance = registry.instances.get(name) or registry.disabled.get(name)
        manifest = instance.manifest if instance else registry.discovery.manifests.get(name)
        if manifest is None:
            for directory, problems in registry.discovery.invalid.items():
                if registry.discovery.invalid_names.get(directory, directory.name) == name:
                    listed = "\n".join(f"  {p}" for p in problems)
                    raise Exit(EXIT_CONFIG, f"plugin {name!r}: its manifest in {directory} is invalid:\n{listed}")
            known = sorted({*registry.instances, *registry.disabled, *registry.discovery.manifests})
            raise Exit(EXIT_USAGE, f"no plugin named {name!r} (configured or discovered: {', '.join(known)})")
        data = {"name": name, **manifest_view(manifest)}

        def text() -> str:
            lines = [f"{manifest.name} {manifest.version} (protocol {manifest.protocol}): {manifest.description}"]
            lines.append(f"  file: {manifest.file}")
            lines.append(f"  entrypoint: {manifest.entrypoint}")
            lines.append(f"  concurrency_safe: {str(manifest.concurrency_safe).lower()}")
            if manifest.required_config or manifest.optional_config:
                lines.append(
                    f"  config: required {list(manifest.required_config)}, optional {list(manifest.optional_config)}"
                )
            lines.append("  commands:")
            for command in data["commands"]:
                lines.append(f"    {command['name']:12} {command['type']:5} {command['description']}")
            lines += [f"  fact: {f['command']} -> {f['fact_type']} (from {f['source']})" for f in data["fact_outputs"]]
            if manifest.cannot_run:
                lines.append(f"  cannot run here: {manifest.cannot_run}")
            return "\n".join(lines)

        self.emit(data, text)

    # -- plugin list ---------------------------------------------------------------------------

    def list_remote(self, options: dict[str, Any]) -> None:
        """The original's `plugin list --api-url`: what a running gateway loaded, from its open
        GET /plugins (a key is sent when one is given or in the environment)."""
        from gateway.cli.api_call import ApiUnanswered, base_url, build_call, config_token, env_token, read_object

        token = options["api_key"] or env_token(os.environ)
        if options["api_url"] is None:
            served = self.gateway_runtime()
            base, token = base_url(served), token or config_token(served)
        else:
            base = options["api_url"]
        try:
            data = read_object(build_call("/plugins", base=base, token=token), timeout=10.0)
        except ApiUnanswered as exc:
            raise Exit(EXIT_FAILED, str(exc)) from exc
        rows = [p for p in data.get("plugins", []) if isinstance(p, dict)]

        def text() -> str:
            width = max([len("NAME"), *(len(str(p.get("name", ""))) for p in rows)])
            lines = [f"{'NAME':{width}}  {'VERSION':8}  COMMANDS"]
            for p in rows:
                lines.append(
                    f"{p.get('name', '')!s:{width}}  {p.get('version', '')!s:8}  {','.join(p.get('commands', []))}"
                )
                if p.get("description"):
                    lines.append(f"{'':{width}}  {p['description']}")
            return "\n".join(lines)

        self.emit(data, text)

    def list_plugins(self, options: dict[str, Any]) -> None:
        runtime = self.runtime()
        registry = runtime.registry
        if options["check"]:
            self._check_health(runtime)
        health: dict[str, str] = {}
        egress: dict[str, list[dict[str, Any]]] = {}
        try:
            self.open_ledger()
            health = dict(PluginInstanceRecord.objects.values_list("name", "health"))
            # The hosts each egress plugin's jobs asked for, summed over the ledger's jobs.
            for name, inst in registry.instances.items():
                if inst.config.sandbox.network == EGRESS:
                    egress[name] = EgressHost.objects.by_plugin(name)
        except Exception:  # plugin list is useful before the database exists or when it is down
            pass
        rows: list[dict[str, Any]] = []
        for state, group in (("enabled", registry.instances), ("disabled", registry.disabled)):
            for name, inst in group.items():
                rows.append(
                    {
                        "name": name,
                        "uses": inst.manifest.name,
                        "state": state,
                        "version": inst.manifest.version,
                        "description": inst.manifest.description,
                        "commands": list(inst.manifest.commands),
                        "parallelism": inst.shown_parallelism,
                        "node_parallelism": inst.node_parallelism,
                        "cluster_parallelism": inst.parallelism,
                        "health": health.get(name, "unknown"),
                        "directory": str(inst.manifest.directory),
                        "sandbox": inst.config.sandbox.describe(),
                        "egress": egress.get(name, []),
                    }
                )
        configured_bases = {p.uses for p in runtime.config.plugins.values()}
        unconfigured = sorted(n for n in registry.discovery.manifests if n not in configured_bases)
        for name in unconfigured:
            # Shown too, so a fresh config's `plugin list` shows every bundled plugin: its health
            # is whether it could run here (its manifest loads, its interpreter is there).
            manifest = registry.discovery.manifests[name]
            rows.append(
                {
                    "name": name,
                    "uses": name,
                    "state": "available",
                    "version": manifest.version,
                    "description": manifest.description,
                    "commands": list(manifest.commands),
                    "parallelism": None,
                    "node_parallelism": None,
                    "cluster_parallelism": None,
                    "health": "cannot run" if manifest.cannot_run else "ready",
                    "directory": str(manifest.directory),
                }
            )
        data: dict[str, Any] = {
            "plugins": sorted(rows, key=lambda r: str(r["name"])),
            "skipped": [{"name": n, "reason": r} for n, r in sorted(registry.skipped.items())],
            "discovered_unconfigured": unconfigured,
            # Of those, the ones that could not run here if configured (a configured one is `skipped`).
            "cannot_run": [
                {"name": n, "reason": reason}
                for n in unconfigured
                if (reason := registry.discovery.manifests[n].cannot_run)
            ],
            "invalid_manifests": [
                {"directory": str(d), "problems": [str(p) for p in problems]}
                for d, problems in sorted(registry.discovery.invalid.items())
            ],
            "warnings": [str(w) for w in registry.warnings],
        }

        def text() -> str:
            lines = [f"{'NAME':24} {'STATE':9} {'VERSION':9} {'PAR':>3} {'HEALTH':9} COMMANDS"]
            for r in data["plugins"]:
                parallelism = "-" if r["parallelism"] is None else r["parallelism"]
                lines.append(
                    f"{r['name']:24} {r['state']:9} {r['version']:9} {parallelism:>3} {r['health']:9} "
                    f"{', '.join(r['commands'])}"
                )
            for r in data["plugins"]:
                lines += [
                    f"egress {r['name']}: {e['host']} {e['verdict']}, {e['requests']} requests by {e['jobs']} jobs"
                    for e in r.get("egress", ())
                ]
            for s in data["skipped"]:
                lines.append(f"skipped {s['name']}: {s['reason']}")
            for d in data["invalid_manifests"]:
                lines.append(f"invalid manifest in {d['directory']}: {'; '.join(d['problems'])}")
            if data["discovered_unconfigured"]:
                lines.append("available: discovered, not configured (add them to plugins.yaml to use them)")
            for c in data["cannot_run"]:
                lines.append(f"cannot run here {c['name']}: {c['reason']}")
            if any(r["health"] == "unknown" and "health" in r["commands"] for r in data["plugins"]):
                lines.append(UNKNOWN_HEALTH)
            return "\n".join(lines)

        self.emit(data, text)

    def _check_health(self, runtime: Runtime) -> None:
        """Each enabled plugin's `health`, run here now through the queue; its answer is the
        plugin's health (ledger: `health_answered`)."""
        self.open_ledger()
        specs = [
            intake.job(runtime, Submitter.CLI, name, "health")
            for name, inst in sorted(runtime.registry.instances.items())
            if "health" in inst.manifest.commands
        ]
        self._run_here([result.job_id for result in intake.submit(runtime, specs)], runtime)

    # -- plugin run ----------------------------------------------------------------------------

    def run_remote(self, options: dict[str, Any]) -> None:
        """The original's `plugin run NAME --api-url URL`: one job through the gateway's API, which
        runs it; the answer is the API's (job_id, status queued, plugin, command)."""
        from gateway.cli.api_call import ApiUnanswered, base_url, build_call, env_token, read_object

        token = options["api_key"] or env_token(os.environ)
        if not token:
            raise Exit(EXIT_USAGE, "an API key is needed with --api-url: --api-key or $DUCTILE_API_KEY")
        document: dict[str, Any] = {}
        if (payload := self._payload(options)) is not None:
            document["payload"] = payload
        if options["dedupe_key"]:
            document["dedupe_key"] = options["dedupe_key"]
        name, command = options["name"], options["command"]
        base = options["api_url"] or base_url(self.gateway_runtime())
        call = build_call(f"/plugin/{name}/{command}", base=base, token=token, method="POST", body=json.dumps(document))
        if options["dry_run"]:
            self.emit({"dry_run": True, "request": call.shown()}, lambda: json.dumps(call.shown(), indent=2))
            return
        try:
            data = read_object(call, timeout=15.0)
        except ApiUnanswered as exc:
            raise Exit(EXIT_FAILED, str(exc)) from exc
        self.emit(data, f"Queued job {data.get('job_id')} ({data.get('plugin')} {data.get('command')})")

    def run_plugin(self, options: dict[str, Any]) -> None:
        runtime = self.open_ledger()
        name, command = options["name"], options["command"]
        spec = intake.job(
            runtime, Submitter.CLI, name, command, self._payload(options), dedupe_key=options["dedupe_key"]
        )
        instance = runtime.registry.instances[name]
        if options["dry_run"]:
            timeout = instance.config.timeout_for(command)
            data = {
                "dry_run": True,
                "plugin": name,
                "uses": instance.manifest.name,
                "command": command,
                "payload": spec.payload or {},
                "dedupe_key": spec.dedupe_key,
                "max_attempts": spec.max_attempts,
                "timeout_seconds": timeout,
            }
            self.emit(data, f"would enqueue {name}.{command} (max {spec.max_attempts} attempts, timeout {timeout:g}s)")
            return
        result = intake.submit(runtime, [spec])[0]
        if result.deduplicated or options["no_wait"]:
            job = Job.objects.get(pk=result.job_id)
            self._report(job, deduplicated=result.deduplicated)
            return
        [job] = self._run_here([result.job_id], runtime)
        self._report(job, deduplicated=False)
        if job.status != "succeeded":
            raise SystemExit(EXIT_FAILED)

    def _payload(self, options: dict[str, Any]) -> dict[str, Any] | None:
        raw = options["payload"]
        source = "--payload"
        if options["payload_file"]:
            source = options["payload_file"]
            try:
                raw = Path(options["payload_file"]).read_text(encoding="utf-8")
            except OSError as exc:
                raise Exit(EXIT_USAGE, f"cannot read {source}: {exc.strerror}") from exc
        return json_object(raw, source)

    def _run_here(self, job_ids: list[str], runtime: Runtime) -> list[Job]:
        """Run our jobs through the normal claim path; if a daemon took one first, wait for it."""
        # A row while it runs (a crash mid-job is then recovered at once, as a dead worker's),
        # gone after: a CLI call is not a daemon to list. Its own id each run: a pid is recycled.
        worker = WorkerInstance.objects.register(
            f"{socket.gethostname()}:{os.getpid()}:cli:{new_id()[:8]}",
            hostname=socket.gethostname(),
            pid=os.getpid(),
            threads=1,
            plugins="",
            roles=CLI,
        )
        try:
            return [self._run_one(job_id, worker, runtime) for job_id in job_ids]
        finally:
            worker.leave()

    def _run_one(self, job_id: str, worker: WorkerInstance, runtime: Runtime) -> Job:
        from gateway.execution.dispatch import Executor
        from gateway.execution.lease_keeper import LeaseKeeper

        while True:
            job = Job.objects.claim_next(
                worker_id=worker.id,
                caps=runtime.claim_caps(),
                lease_ttl=runtime.config.service.lease_ttl,
                only=job_id,
                slots=1,  # one job at a time
            )
            if job is not None:
                with LeaseKeeper(worker, job.id, runtime.config.service.lease_ttl):
                    Executor(RUNTIME, worker.id).execute(job)
                return Job.objects.get(pk=job_id)
            job = Job.objects.get(pk=job_id)
            if job.is_terminal or (job.status == "queued" and job.attempt > 1):
                return job
            time.sleep(0.05)

    def _report(self, job: Job, *, deduplicated: bool) -> None:
        data = {
            "job_id": job.id,
            "plugin": job.plugin,
            "command": job.command,
            "status": job.status,
            "attempt": job.attempt,
            "deduplicated": deduplicated,
            "error": job.last_error,
            "next_retry_at": ts(job.next_retry_at),
            "result": latest_result(job),
        }

        def text() -> str:
            lines = [
                f"job {job.id}: {job.status}"
                + (" (deduplicated: an earlier job already did this)" if deduplicated else "")
            ]
            if job.status == "queued" and job.next_retry_at:
                lines.append(
                    f"attempt {job.attempt - 1} failed; retry {job.attempt}/{job.max_attempts} "
                    f"at {ts(job.next_retry_at)}"
                )
            if job.last_error:
                lines.append(f"error: {one_line(job.last_error)}")
            result = data["result"]
            if isinstance(result, dict) and "result" in result:
                lines.append(f"result: {result['result']}")
            return "\n".join(lines)

        self.emit(data, text)


# Health is a plugin's last answer to its `health` command; a gateway asks at no fixed time, so
# a plugin of a fresh config, or one without `init`, has none until someone does (one without a
# `health` command never has one, and `--check` cannot help it).
UNKNOWN_HEALTH = "unknown health: no answer to its health command recorded yet; `plugin list --check` asks now"


def manifest_view(manifest: Manifest) -> dict[str, Any]:
    """Everything a manifest declares, as `plugin manifest` shows it."""
    return {
        "manifest": manifest.name,
        "version": manifest.version,
        "protocol": manifest.protocol,
        "description": manifest.description,
        "file": str(manifest.file),
        "directory": str(manifest.directory),
        "entrypoint": str(manifest.entrypoint),
        "concurrency_safe": manifest.concurrency_safe,
        "max_subs": manifest.max_subs,
        "config": {"required": list(manifest.required_config), "optional": list(manifest.optional_config)},
        "config_schema": thaw(manifest.config_schema) if manifest.config_schema is not None else None,
        "commands": [
            {
                "name": c.name,
                "type": c.type,
                "description": c.description,
                "idempotent": c.idempotent,
                "retry_safe": c.retry_safe,
                "input_schema": thaw(c.input_schema) if c.input_schema is not None else None,
                "output_schema": thaw(c.output_schema) if c.output_schema is not None else None,
                "values": thaw(c.values) if c.values is not None else None,
            }
            for c in manifest.commands.values()
        ],
        "fact_outputs": [
            {
                "command": f.command,
                "source": f.source,
                "fact_type": f.fact_type,
                "compatibility_view": f.compatibility_view,
            }
            for f in manifest.fact_outputs
        ],
        "manifest_hash": "blake3:" + manifest.fingerprint,  # of manifest.yaml's bytes
        "cannot_run": manifest.cannot_run,
    }
