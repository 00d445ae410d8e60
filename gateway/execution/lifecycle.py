"""`init` runs through the queue on first discovery and whenever the plugin (its manifest or its
entrypoint) or its config changes (spec §5.2: not retried; a failure marks the plugin unhealthy)."""

from __future__ import annotations

import json

import blake3

from gateway import intake
from gateway.config.frozen import thaw
from gateway.runtime import Runtime
from ledger.models import PluginInstanceRecord


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
        record = PluginInstanceRecord.objects.filter(name=instance.name).first()
        if record is not None and record.fingerprint == fingerprint:
            continue
        result = intake.submit(runtime, [intake.init(runtime, instance.name, fingerprint)])[0]
        PluginInstanceRecord.objects.init_started(instance.name, fingerprint=fingerprint, job_id=result.job_id)
        enqueued.append(result.job_id)
    return enqueued
