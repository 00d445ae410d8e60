"""`config_snapshots`: each distinct config the gateway ran on (spec 000 Database Reference, "Fact
Rows vs Current Rows": a durable fact table). A row is written when `system start` loads a config
and when a reload installs one (gateway/daemon/supervisor.py), never by a CLI call that only reads:
the ledger then says which config was in force when a job ran, and what changed between two.

Append-only: one row per fingerprint, the first time that config was loaded (starting again on
an unchanged config adds nothing). Its content is the redacted merged document and the list of
files it was read from, with their hashes; never a secret. Housekeeping prunes rows older than
`job_log_retention`, but never the newest, which describes the config in force.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import IntegrityError, models

from ledger.models.retention import PrunableQuerySet
from ledger.writes.transaction import writing


class ConfigSnapshotQuerySet(PrunableQuerySet["ConfigSnapshot"]):
    def record(self, snapshot: ConfigSnapshot) -> tuple[ConfigSnapshot, bool]:
        """Insert `snapshot` unless its fingerprint is recorded already: the row, and whether it is new."""
        held = self.filter(fingerprint=snapshot.fingerprint).first()
        if held is not None:
            return held, False
        try:
            with writing():
                snapshot.save(force_insert=True)
        except IntegrityError:  # another process recorded the same config meanwhile
            return self.get(fingerprint=snapshot.fingerprint), False
        return snapshot, True

    def expired(self, before: datetime) -> ConfigSnapshotQuerySet:
        """Loaded before `before`, except the newest row (the config in force is always kept)."""
        newest = self.order_by("-loaded_at", "-id").values_list("pk", flat=True)[:1]
        return self.filter(loaded_at__lt=before).exclude(pk__in=list(newest))


class ConfigSnapshot(models.Model):
    fingerprint = models.CharField(max_length=80, unique=True)  # `blake3:<hex>` (gateway/config/snapshots.py)
    loaded_at = models.DateTimeField()
    reason = models.CharField(max_length=16)  # start | reload
    # Who loaded it: the process, its host and its user (`system start (pid 4211, alice@nas)`).
    loaded_by = models.CharField(max_length=300)
    config_dir = models.TextField()
    files = models.JSONField(default=list)  # [{path, tier, blake3}]
    content = models.JSONField(default=dict)  # the merged document, redacted

    objects = ConfigSnapshotQuerySet.as_manager()

    class Meta:
        db_table = "config_snapshots"
        indexes = [models.Index(fields=["loaded_at"], name="config_snapshots_loaded_idx")]

    def __str__(self) -> str:
        return f"{self.fingerprint[:19]} ({self.reason} {self.loaded_at:%Y-%m-%d %H:%M})"

    def as_dict(self, *, content: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = {
            "fingerprint": self.fingerprint,
            "loaded_at": self.loaded_at,
            "reason": self.reason,
            "loaded_by": self.loaded_by,
            "config_dir": self.config_dir,
            "files": self.files,
        }
        if content:
            data["content"] = self.content
        return data
