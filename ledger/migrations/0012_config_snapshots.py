"""`config_snapshots`: each distinct config `system start` loaded or a reload installed, redacted
(ledger/models/config_snapshots.py). Both console roles may view it, as every ledger table (the
grant runs again for every table, so one added since 0006 without it, relay_acceptances, gets it too).
"""

from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

from ledger.roles import ensure_permissions, grant_views


def grant(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    ensure_permissions(apps, schema_editor)
    grant_views(apps)


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0011_relay_acceptances'),
    ]

    operations = [
        migrations.CreateModel(
            name='ConfigSnapshot',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('fingerprint', models.CharField(max_length=80, unique=True)),
                ('loaded_at', models.DateTimeField()),
                ('reason', models.CharField(max_length=16)),
                ('loaded_by', models.CharField(max_length=300)),
                ('config_dir', models.TextField()),
                ('files', models.JSONField(default=list)),
                ('content', models.JSONField(default=dict)),
            ],
            options={
                'db_table': 'config_snapshots',
                'indexes': [models.Index(fields=['loaded_at'], name='config_snapshots_loaded_idx')],
            },
        ),
        migrations.RunPython(grant, migrations.RunPython.noop),
    ]
