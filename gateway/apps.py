from __future__ import annotations

import gc

from corsheaders.signals import check_request_enabled
from django.apps import AppConfig
from django.conf import settings
from django.core.signals import request_started

from gateway.http.cors import origin_allowed
from gateway.logs import apply_service_logging
from gateway.runtime import RUNTIME
from gateway.storage.hangups import drop_connections_the_server_ended
from gateway.storage.wake_listener import poke_local_waiters, poke_local_workers
from ledger import job_notifications


class GatewayConfig(AppConfig):
    name = "gateway"
    verbose_name = "Gateway"

    def ready(self) -> None:
        if not gc.isenabled():
            # The CLI starts with the collector off (gateway.cli.main), and set-up is over. What it
            # built is kept out of the collector's walks: the first collection after the switch
            # would otherwise walk all of it as young objects (~26 ms of every command's start).
            gc.freeze()
            gc.enable()
        # Django's logging set-up, just before this, set the level of settings.LOGGING. A process
        # whose config did not load (it reports why, and exits) logs at the default.
        if RUNTIME.error is None and RUNTIME.config_dir is not None:
            service = RUNTIME.get().config.service
            apply_service_logging(service.log_level, service.log_format)
        else:
            apply_service_logging("info")

        # Every process that enqueues (CLI, API, scheduler, workers) pokes same-host workers, and
        # every process that finishes a job pokes same-host tree waiters (synchronous pipelines).
        # Workers are poked before the commit: waking another process's idle thread takes
        # ~0.2 ms on a VM, about what the enqueue's commit takes, and the woken thread then waits
        # for the write gate, which the enqueuer releases after its commit (docs/performance.md,
        # "Pipelines": the root hop).
        job_notifications.add_listener(poke_local_workers, job_notifications.ENQUEUED, at_once=True)
        job_notifications.add_listener(poke_local_waiters, job_notifications.FINISHED)

        check_request_enabled.connect(origin_allowed, dispatch_uid="ductile-cors")

        if "postgresql" in settings.DATABASES["default"]["ENGINE"]:
            # A server restart ends every connection; the API's request threads would each fail
            # once on theirs (SQLite has no server to end them: nothing added to its requests).
            request_started.connect(drop_connections_the_server_ended, dispatch_uid="ductile-hangups")
