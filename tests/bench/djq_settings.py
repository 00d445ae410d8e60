"""Settings for the django-q2 comparison in bench_throughput.py (never used by the gateway).

The project's settings (which install `django_q` for housekeeping), on a throw-away SQLite file
(BENCH_DJQ_DB) with the same WAL / IMMEDIATE / busy-timeout options the gateway uses, and an
ORM-broker cluster of 2 workers.
"""

from __future__ import annotations

import os

from ductile_site.settings import *  # noqa: F403
from ductile_site.settings import SQLITE_OPTIONS

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["BENCH_DJQ_DB"],
        "OPTIONS": dict(SQLITE_OPTIONS),
    }
}

Q_CLUSTER = {
    "name": "bench",
    "orm": "default",
    "workers": 2,
    "timeout": 60,
    "retry": 120,
    # Keep every success row: the benchmark waits until all 2,000 results are stored.
    "save_limit": 0,
    "scheduler": False,
    "log_level": "WARNING",
}

LOGGING = {"version": 1, "disable_existing_loggers": False}
