from __future__ import annotations

from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "gateway"
    verbose_name = "Gateway"

    def ready(self) -> None:
        from gateway.storage.wakeup import poke_local_waiters, poke_local_workers
        from ledger import wakeups

        # Every process that enqueues (CLI, API, scheduler, workers) pokes same-host workers, and
        # every process that finishes a job pokes same-host tree waiters (synchronous pipelines).
        wakeups.add_listener(poke_local_workers, wakeups.ENQUEUED)
        wakeups.add_listener(poke_local_waiters, wakeups.FINISHED)
