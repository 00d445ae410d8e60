"""The `config_snapshots` row of a config the gateway starts or reloads on (ledger/models/config_snapshots.py).

Its fingerprint covers what the row shows, the redacted merged document, and the hash of every file
the config was read from (YAML, `.env`, scope files): an edit anywhere, a secret's in a `.env`
included, is a new config; a secret set only in the process environment is not seen (it is never
stored, nor hashed).
"""

from __future__ import annotations

import getpass
import json
import os
import socket

import blake3
from django.utils import timezone

from gateway.config.integrity import file_digest, scope_files, tier_of
from gateway.logs import logger
from gateway.reports.redaction import config_view
from gateway.runtime import Runtime
from ledger.models.config_snapshots import ConfigSnapshot

log = logger("daemon")


def snapshot_of(runtime: Runtime, reason: str) -> ConfigSnapshot:
    """The row for `runtime`'s config, not yet saved."""
    config = runtime.config
    paths = dict.fromkeys([*config.files, *config.env_files, *scope_files(config.config_dir)])
    files = [{"path": str(p), "tier": str(tier_of(p)), "blake3": file_digest(p)} for p in paths]
    content = config_view(config.document)
    body = json.dumps({"content": content, "files": files}, sort_keys=True, default=str, separators=(",", ":"))
    return ConfigSnapshot(
        fingerprint="blake3:" + blake3.blake3(body.encode()).hexdigest(),
        loaded_at=timezone.now(),
        reason=reason,
        loaded_by=f"system start (pid {os.getpid()}, {_user()}@{socket.gethostname()})",
        config_dir=str(config.config_dir),
        files=files,
        content=json.loads(json.dumps(content, default=str)),
    )


def record_config(runtime: Runtime, reason: str) -> None:
    """Record the config unless it is recorded already. A failure is logged, never raised: the
    gateway runs on regardless, and the next start or reload records it."""
    try:
        row, new = ConfigSnapshot.objects.record(snapshot_of(runtime, reason))
    except Exception:
        log.exception("the config's config_snapshots row could not be written")
        return
    if new:
        log.info("config %s recorded in config_snapshots (%s)", row.fingerprint, reason)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's)
        return str(os.getuid())
