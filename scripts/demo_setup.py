"""The demo's set-up in one process (scripts/demo): migrate, seal, the console accounts, a first
wave of jobs. Each step is what its CLI command does (`ductile migrate`, `config lock`,
`admin create-user --update`, `plugin run --no-wait`), without a Python start-up per step, so a
second `./scripts/demo` is serving in a few seconds."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.bootstrap import prepare_process


def main() -> None:
    prepare_process(os.environ["DUCTILE_CONFIG_DIR"])
    import django

    django.setup()
    from django.core.management import call_command

    from gateway.operations.accounts import save_account
    from ledger.roles import ROLES

    quiet = io.StringIO()
    call_command("migrate", interactive=False, verbosity=0)
    # The seal (.checksums) is keyed by absolute path, and moving a config directory breaks it
    # (spec: "Configuration Specification" §2.1), so the demo seals this checkout's copy.
    call_command("config", "lock", stdout=quiet)
    for role in ROLES:
        prefix = f"DUCTILE_DEMO_{role.upper()}"
        save_account(os.environ[prefix], role, os.environ[f"{prefix}_PASSWORD"], update=True)
    # A first wave of work so the daemon visibly runs jobs at once.
    for plugin in ("echo", "py-greet", "uptime"):
        call_command("plugin", "run", plugin, "--no-wait", stdout=quiet)


if __name__ == "__main__":
    main()
