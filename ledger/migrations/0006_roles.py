"""The `auditor` and `operator` groups (ledger/roles.py), each with view permission on every table
of the ledger and of the housekeeping queue."""

from __future__ import annotations

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

from ledger.roles import ROLES, ensure_permissions, grant_views


def create_roles(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    ensure_permissions(apps, schema_editor)
    grant_views(apps)


def remove_roles(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    apps.get_model("auth", "Group").objects.filter(name__in=ROLES).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0005_retention_indexes"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(create_roles, remove_roles)]
