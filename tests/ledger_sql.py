"""One SQL statement on the database a config's gateway processes use, from a subprocess as those
processes see it: how a test moves rows back in time (a job finished days ago, a schedule due)."""

from __future__ import annotations

import subprocess
import sys

from tests.support import REPO, ConfigDir, cli_env

_SNIPPET = """
import sys
from gateway.bootstrap import prepare_process
prepare_process(sys.argv[1])
import django
django.setup()
from django.db import connection
with connection.cursor() as cursor:
    cursor.execute(sys.argv[2])
"""


def run_sql(config: ConfigDir, statement: str) -> None:
    database = config.database_url or f"sqlite:///{config.db_path}"
    proc = subprocess.run(
        [sys.executable, "-c", _SNIPPET, str(config.path), statement],
        capture_output=True,
        text=True,
        timeout=60,
        env=cli_env(config, DATABASE_URL=database),
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
