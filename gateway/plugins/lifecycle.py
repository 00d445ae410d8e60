"""`init` runs through the queue on first discovery and whenever the plugin (its manifest or its
entrypoint) or its config changes (spec §5.2: not retried; a failure marks the plugin unhealthy)."""

from __future__ import annotations

import json

import blake3

from gateway.config.frozen import thaw
from gateway.runtime import Runtime
from ledger.models import Job, JobSpec, PluginInstanceRecord
from ledger.models.workers import PluginHealth

INIT_DEDUPE_TTL = 365 * 86400.0


def instance_fingerprint(code_hash: str, config: object) -> str:
    body = code_hash + json.dumps(thaw(config), sort_keys=True, default=str)
    return blake3.blake3(body.encode()).hexdigest()[:32]


def schedule_inits(runtime: Runtime) -> list[str]:
    """Enqueue `init` for every plugin whose manifest or config changed since its last init."""
    enqueued = []
    for instance in runtime.registry.instances.values():
        if "init" not in instance.manifest.commands:
            continue
        # The code (manifest and entrypoint, as the seal fingerprints them) and the config.
        code = runtime.plugin_seal.loaded.get(instance.name)
        code_hash = code.manifest_hash + code.entrypoint_hash if code else instance.manifest.fingerprint
        fingerprint = instance_fingerprint(code_hash, instance.config.config)
        record, _ = PluginInstanceRecord.objects.get_or_create(name=instance.name)
        if record.fingerprint == fingerprint:
            continue
        result = Job.objects.enqueue(
            JobSpec(
                plugin=instance.name,
                command="init",
                submitted_by="system",
                max_attempts=1,
                dedupe_key=f"init:{instance.name}:{fingerprint}",
                dedupe_ttl=INIT_DEDUPE_TTL,
            ),
            default_dedupe_ttl=runtime.config.service.dedupe_ttl,
        )
        PluginInstanceRecord.objects.filter(name=instance.name).update(
            fingerprint=fingerprint, init_job_id=result.job_id, health=PluginHealth.UNKNOWN
        )
        enqueued.append(result.job_id)
    return enqueued
