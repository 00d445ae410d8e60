"""The demo's set-up in one process (scripts/demo): migrate, seal, the console accounts, a first
wave of jobs. Each step is what its CLI command does (`ductile migrate`, `config lock`,
`admin create-user --update`, `plugin run --no-wait`), without a Python start-up per step, so a
second `./scripts/demo` is serving in a few seconds."""

from __future__ import annotations

import io
import json
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

    quiet = io.StringIO()
    call_command("migrate", interactive=False, verbosity=0)
    # The seal (.checksums) is keyed by absolute path, and moving a config directory breaks it
    # (spec: "Configuration Specification" §2.1), so the demo seals this checkout's copy.
    call_command("config", "lock", stdout=quiet)
    accounts()
    first_wave(quiet)


def accounts() -> None:
    """The console's accounts named in .env, (re)made with their passwords there."""
    from gateway.operations.accounts import save_account
    from ledger.roles import ROLES

    for role in ROLES:
        prefix = f"DUCTILE_DEMO_{role.upper()}"
        save_account(os.environ[prefix], role, os.environ[f"{prefix}_PASSWORD"], update=True)


def first_wave(out: io.StringIO) -> None:
    """Work for the daemon to run at once: a few plugins, the export that fails for good (a dead
    job to Retry, whose end starts the on-hook pipeline), and the pipeline with a switch for a
    named user (reported) and a guest (not). The scheduled polls start themselves."""
    from django.core.management import call_command

    for plugin in ("echo", "py-greet", "uptime", "nightly_export"):
        call_command("plugin", "run", plugin, "--no-wait", stdout=out)
    for user in ("ada", "guest"):
        call_command("event", "publish", "demo.greet", "--payload", json.dumps({"user": user}), stdout=out)


if __name__ == "__main__":
    main()
