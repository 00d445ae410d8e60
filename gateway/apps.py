from __future__ import annotations

from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "gateway"
    verbose_name = "Gateway"

    def ready(self) -> None:
        from gateway.wakeup import poke_local_workers
        from ledger import wakeups

        # Every process that enqueues (CLI, API, scheduler, workers) pokes same-host workers.
        wakeups.add_listener(poke_local_workers)
