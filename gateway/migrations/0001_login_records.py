"""Both roles read the console's login records (django-axes' tables: lockouts, failed logins,
logins); the `operator` group may also lift a lockout (ledger/roles.py). Here, not in the ledger:
the tables are axes', and the groups' other grants are the ledger's migrations 0006 and 0008."""

from __future__ import annotations

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from ledger.roles import LOGIN_RECORDS, ROLES, UNLOCK, ensure_permissions, grant_login_records, permissions


def grant(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    ensure_permissions(apps, schema_editor)
    grant_login_records(apps)


def revoke(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    group_model = apps.get_model("auth", "Group")
    for name in ROLES:
        group_model.objects.get(name=name).permissions.remove(*permissions(apps, (*LOGIN_RECORDS, *UNLOCK)))


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0008_operator_actions"),
        ("axes", "0010_accessattemptexpiration"),
    ]

    operations = [migrations.RunPython(grant, revoke)]
