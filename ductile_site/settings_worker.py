"""Settings of `runworkers` and of the console script's commands that read and write the ledger
alone (gateway.cli.nouns; chosen by gateway.bootstrap.choose_settings): the gateway's settings with
only the apps their start-up and work use. Why: the admin (with its discovery of the console's
modules), DRF, drf-spectacular and django-q2 (which imports croniter, psutil and multiprocessing)
are about 45 ms of every worker's start and of every such CLI call, and serve no page or
housekeeping task there (docs/performance.md, "Throughput"; issue 36). The ledger's migrations
depend on the other apps' (auth, contenttypes, django_q): a process that finds any migration
unapplied starts again on the full settings to check or migrate (gateway.storage.database.ensure_schema)."""

from __future__ import annotations

from ductile_site.settings import *  # noqa: F403
from ductile_site.settings import INSTALLED_APPS

INSTALLED_APPS = [app for app in INSTALLED_APPS if app in ("ledger", "pipelines", "gateway")]
# Read by ensure_schema: this app registry cannot build the migration graph.
DUCTILE_LEDGER_APPS_ONLY = True
