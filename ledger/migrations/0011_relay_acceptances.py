"""`relay_acceptances`: the relayed deliveries accepted, kept while a replay or a sender's retry of
one may come, so that it is answered as the first was and starts nothing (ledger/models/relay_acceptances.py).
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0010_no_running_index'),
    ]

    operations = [
        migrations.CreateModel(
            name='RelayAcceptance',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('peer', models.CharField(max_length=200)),
                ('signature', models.CharField(max_length=64)),
                ('event_type', models.TextField()),
                ('dedupe_key', models.TextField(blank=True, null=True)),
                ('scope', models.CharField(blank=True, max_length=64, null=True)),
                ('receiver_event_id', models.CharField(max_length=36)),
                ('job_id', models.CharField(blank=True, max_length=36, null=True)),
                ('accepted_at', models.DateTimeField()),
                ('expires_at', models.DateTimeField()),
            ],
            options={
                'db_table': 'relay_acceptances',
                'indexes': [models.Index(fields=['expires_at'], name='relay_acceptances_expiry_idx')],
                'constraints': [models.UniqueConstraint(fields=('peer', 'signature'), name='relay_acceptances_signature_uniq'), models.UniqueConstraint(condition=models.Q(('scope__isnull', False)), fields=('peer', 'scope'), name='relay_acceptances_scope_uniq')],
            },
        ),
    ]
