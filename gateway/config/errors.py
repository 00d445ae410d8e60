"""Config problems that name the file, line and key, so an agent can fix them without guessing."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ConfigProblem:
    message: str
    file: Path | None = None
    line: int | None = None
    key: str | None = None

    def __str__(self) -> str:
        where = ""
        if self.file is not None:
            where = str(self.file) + (f":{self.line}" if self.line else "")
        if self.key:
            where = f"{where} key {self.key}" if where else f"key {self.key}"
        return f"{where}: {self.message}" if where else self.message

    def as_dict(self) -> dict[str, object]:
        return {
            "file": str(self.file) if self.file else None,
            "line": self.line,
            "key": self.key,
            "message": self.message,
        }


class ConfigError(Exception):
    """A config that must not load. Carries every problem found, not just the first."""

    exit_code = 78  # EX_CONFIG, as the spec's operators expect

    def __init__(self, problems: Iterable[ConfigProblem]):
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))
