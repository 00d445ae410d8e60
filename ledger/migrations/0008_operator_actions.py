"""The `operator` group gets the console's actions (ledger/roles.py OPERATOR_ACTIONS); both roles
read the console's own audit trail of who took which action (admin LogEntry)."""

from __future__ import annotations

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.models import Q

from ledger.roles import AUDIT_TRAIL, OPERATOR, OPERATOR_ACTIONS, ROLES, ensure_permissions


def _permissions(apps: Apps, pairs: tuple[tuple[str, str], ...]) -> list[object]:
    query = Q(pk__in=[])
    for app_label, codename in pairs:
        query |= Q(content_type__app_label=app_label, codename=codename)
    found = list(apps.get_model("auth", "Permission").objects.filter(query))
    assert len(found) == len(pairs), f"missing permissions: expected {pairs}"
    return found


def grant(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    ensure_permissions(apps, schema_editor)
    group_model = apps.get_model("auth", "Group")
    trail = _permissions(apps, (AUDIT_TRAIL,))
    for name in ROLES:
        group_model.objects.get(name=name).permissions.add(*trail)
    group_model.objects.get(name=OPERATOR).permissions.add(*_permissions(apps, OPERATOR_ACTIONS))


def revoke(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    group_model = apps.get_model("auth", "Group")
    for name in ROLES:
        group_model.objects.get(name=name).permissions.remove(*_permissions(apps, (AUDIT_TRAIL, *OPERATOR_ACTIONS)))


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0007_console"),
        ("admin", "0003_logentry_add_action_flag_choices"),
    ]

    operations = [migrations.RunPython(grant, revoke)]
