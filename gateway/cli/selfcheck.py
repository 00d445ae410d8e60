"""`system selfcheck`: the checks of gateway/operations/selfcheck.py, as text or `--json`."""

from __future__ import annotations

from gateway.cli.base import EXIT_FAILED, DuctileCommand
from gateway.operations.selfcheck import report, selfcheck


def run_selfcheck(command: DuctileCommand) -> None:
    checks = selfcheck()
    data = report(checks)
    healthy = data["ok"]

    def text() -> str:
        lines = [f"selfcheck: {'PASS' if healthy else 'FAIL'}"]
        for c in checks:
            lines.append(f"- {c.name}: {c.status.upper()}" + (f" ({c.path})" if c.path else "") + f" - {c.detail}")
        return "\n".join(lines)

    command.emit(data, text)
    if not healthy:
        raise SystemExit(EXIT_FAILED)
