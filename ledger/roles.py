"""The audit console's two roles, as Django groups made by migrations 0006 and 0008 (ARCHITECTURE,
"Human surfaces"): an auditor may view every ledger table and act on nothing; an operator may also
take the console's explicit actions. Both read the console's login records, and an operator may lift
a lockout (gateway migration 0001: those tables are django-axes')."""

from __future__ import annotations

from typing import Any

from django.apps.registry import Apps
from django.contrib.auth.management import create_permissions
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.models import Q

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

# The console's login records (django-axes' tables): lockouts, failed logins, logins. Both read them.
LOGIN_RECORDS = (("axes", "view_accessattempt"), ("axes", "view_accessfailurelog"), ("axes", "view_accesslog"))
# An operator may lift a lockout: it clears the failures of a username and address.
UNLOCK = (("axes", "change_accessattempt"),)


def ensure_permissions(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """Make every model's permissions now. Django makes them after the last migration ran
    (post_migrate); a data migration on a fresh database would not find them yet (idempotent)."""
    for app_config in apps.get_app_configs():
        app_config.models_module = True  # type: ignore[assignment]  # "has models": what create_permissions asks
        create_permissions(app_config, apps=apps, verbosity=0, using=schema_editor.connection.alias)
        app_config.models_module = None


def grant_views(apps: Apps) -> None:
    """Both groups, each with view permission on every table of VIEWABLE_APPS (migration 0006).
    `apps`: a migration's historical registry, or `django.apps.apps` (idempotent)."""
    group_model = apps.get_model("auth", "Group")
    views = apps.get_model("auth", "Permission").objects.filter(
        content_type__app_label__in=VIEWABLE_APPS, codename__startswith="view_"
    )
    for name in ROLES:
        group, _ = group_model.objects.get_or_create(name=name)
        group.permissions.add(*views)


def grant_actions(apps: Apps) -> None:
    """The operator's actions, and the audit trail for both (migration 0008; idempotent)."""
    group_model = apps.get_model("auth", "Group")
    trail = permissions(apps, (AUDIT_TRAIL,))
    for name in ROLES:
        group_model.objects.get(name=name).permissions.add(*trail)
    group_model.objects.get(name=OPERATOR).permissions.add(*permissions(apps, OPERATOR_ACTIONS))


def grant_login_records(apps: Apps) -> None:
    """The login records for both roles, lifting a lockout for the operator (idempotent)."""
    group_model = apps.get_model("auth", "Group")
    records = permissions(apps, LOGIN_RECORDS)
    for name in ROLES:
        group_model.objects.get(name=name).permissions.add(*records)
    group_model.objects.get(name=OPERATOR).permissions.add(*permissions(apps, UNLOCK))


def permissions(apps: Apps, pairs: tuple[tuple[str, str], ...]) -> list[Any]:
    query = Q(pk__in=[])
    for app_label, codename in pairs:
        query |= Q(content_type__app_label=app_label, codename=codename)
    found = list(apps.get_model("auth", "Permission").objects.filter(query))
    assert len(found) == len(pairs), f"missing permissions: expected {pairs}"
    return found
