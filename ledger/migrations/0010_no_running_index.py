"""job_queue's partial index of running jobs is gone (docs/performance-history.md, item 45). It was meant for
a claim's per-plugin running counts and the lost-job scan, but SQLite's planner, which has no
statistics, reads (status, created_at) for both, so the index was written at every claim and every
completion and read by nothing. PostgreSQL reads the same (status, created_at) range of the few
running rows, and the claim's same-key check has job_queue_dedupe_idx.
"""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0009_leaner_per_job_indexes'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='job',
            name='job_queue_running_idx',
        ),
    ]
