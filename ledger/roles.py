"""The audit console's two roles, as Django groups made by migrations 0006 and 0008 (ARCHITECTURE,
"Human surfaces"): an auditor may view every ledger table and act on nothing; an operator may also
take the console's explicit actions."""

from __future__ import annotations

from django.apps.registry import Apps
from django.contrib.auth.management import create_permissions
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

AUDITOR = "auditor"
OPERATOR = "operator"
ROLES = (AUDITOR, OPERATOR)
# Apps whose every table both roles may read: the ledger and the housekeeping queue.
VIEWABLE_APPS = ("ledger", "django_q")
# The console's record of who took which action (django.contrib.admin's LogEntry): both read it.
AUDIT_TRAIL = ("admin", "view_logentry")
# What only an operator may do (Meta.permissions of Job, CircuitBreaker and ScheduleEntry).
OPERATOR_ACTIONS = (
    ("ledger", "replay_job"),
    ("ledger", "cancel_job"),
    ("ledger", "retry_job"),
    ("ledger", "reset_breaker"),
    ("ledger", "pause_schedule"),
)


def ensure_permissions(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """Make every model's permissions now. Django makes them after the last migration ran
    (post_migrate); a data migration on a fresh database would not find them yet (idempotent)."""
    for app_config in apps.get_app_configs():
        app_config.models_module = True  # type: ignore[assignment]  # "has models": what create_permissions asks
        create_permissions(app_config, apps=apps, verbosity=0, using=schema_editor.connection.alias)
        app_config.models_module = None
