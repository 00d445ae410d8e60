"""The `operator` group gets the console's actions (ledger/roles.py OPERATOR_ACTIONS); both roles
read the console's own audit trail of who took which action (admin LogEntry)."""

from __future__ import annotations

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from ledger.roles import AUDIT_TRAIL, OPERATOR_ACTIONS, ROLES, ensure_permissions, grant_actions, permissions


def grant(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    ensure_permissions(apps, schema_editor)
    grant_actions(apps)


def revoke(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    group_model = apps.get_model("auth", "Group")
    for name in ROLES:
        group_model.objects.get(name=name).permissions.remove(*permissions(apps, (AUDIT_TRAIL, *OPERATOR_ACTIONS)))


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0007_console"),
        ("admin", "0003_logentry_add_action_flag_choices"),
    ]

    operations = [migrations.RunPython(grant, revoke)]
