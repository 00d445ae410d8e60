"""`job_attempts`: one row per attempt of a job and how it ended (ledger/models/attempts.py),
viewable by both console roles as every ledger table is (ledger/roles.py)."""

import django.utils.timezone
from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

from ledger.roles import ensure_permissions, grant_views


def grant_view(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    ensure_permissions(apps, schema_editor)
    grant_views(apps)


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0011_relay_acceptances'),
    ]

    operations = [
        migrations.CreateModel(
            name='JobAttempt',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('job_id', models.CharField(max_length=36)),
                ('attempt', models.IntegerField()),
                ('status', models.CharField(max_length=16)),
                ('worker', models.CharField(blank=True, max_length=200, null=True)),
                ('started_at', models.DateTimeField(blank=True, null=True)),
                ('completed_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('error', models.TextField(blank=True, null=True)),
            ],
            options={
                'db_table': 'job_attempts',
                'ordering': ['id'],
                'constraints': [models.UniqueConstraint(fields=('job_id', 'attempt'), name='job_attempts_job_attempt_uniq')],
            },
        ),
        migrations.RunPython(grant_view, migrations.RunPython.noop),
    ]
