"""`skills` (also `system skills`): every plugin command and callable pipeline as a skill, in
Markdown for an LLM's context, or with `--json` the same data as `GET /skills`."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from gateway.cli.base import DuctileCommand
from gateway.cli.nouns import NOUNS
from gateway.reports.skills import markdown, skills
from gateway.version import gateway_version


class Command(DuctileCommand):
    help = NOUNS["skills"].summary

    def add_arguments(self, parser: CommandParser) -> None:
        self.add_json(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        runtime = self.runtime()
        entries = skills(runtime)
        self.emit(
            {"skills": entries},
            lambda: markdown(entries, version=gateway_version(), config_dir=str(runtime.config.config_dir)),
        )
