from __future__ import annotations

from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class LedgerConfig(AppConfig):
    name = "ledger"
    verbose_name = "Execution ledger"
    default_auto_field = "django.db.models.BigAutoField"


class ConsoleAdminConfig(admin_apps.AdminConfig):
    """django.contrib.admin with the audit console site (ledger/console/site.py) as `admin.site`.
    Named in full in INSTALLED_APPS; not this module's default (that is LedgerConfig)."""

    default = False

    default_site = "ledger.console.site.ConsoleSite"
