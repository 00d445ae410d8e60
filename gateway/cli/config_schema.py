"""`config schema [--name NAME]` and `config validate --file PATH [--name NAME]`, as the
original's: the JSON Schemas shipped with the gateway, and a structure-only check of one file
against one of them (no includes, no seal, no secrets: an unprivileged user can run it). `config
check` is the full load."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gateway.cli.base import EXIT_FAILED, EXIT_USAGE, Exit
from gateway.config.model import config_schema
from gateway.config.validity import describe_all, schema_errors
from gateway.config.yamlsrc import Yaml12Loader, dotted
from gateway.plugins.manifest import manifest_schema

if TYPE_CHECKING:
    from gateway.cli.base import DuctileCommand

SCHEMAS: dict[str, Callable[[], dict[str, Any]]] = {"config": config_schema, "manifest": manifest_schema}


def add_schema_parsers(actions: Any, command: DuctileCommand) -> None:
    schema = actions.add_parser("schema", help="the JSON Schemas shipped with the gateway (none named: their names)")
    schema.add_argument("--name", choices=sorted(SCHEMAS), help="the schema to print")
    command.add_json(schema)
    validate = actions.add_parser(
        "validate", help="one YAML file's structure against a schema (config check loads all)"
    )
    validate.add_argument("--file", required=True, metavar="PATH", help="a config file, or a plugin's manifest.yaml")
    validate.add_argument("--name", choices=sorted(SCHEMAS), default="config", help="default: config")
    command.add_json(validate)


def run_schema(command: DuctileCommand, name: str | None) -> None:
    if name is None:
        command.emit({"schemas": sorted(SCHEMAS)}, "\n".join(sorted(SCHEMAS)))
        return
    schema = SCHEMAS[name]()
    command.emit(schema, json.dumps(schema, indent=2))


def run_validate(command: DuctileCommand, file: str, name: str) -> None:
    path = Path(file).expanduser()
    try:
        document = yaml.load(path.read_text(encoding="utf-8"), Loader=Yaml12Loader)
    except OSError as exc:
        raise Exit(EXIT_USAGE, f"cannot read {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise Exit(EXIT_FAILED, f"{path} is not valid YAML: {exc}", {"valid": False}) from exc
    problems = []
    for error in schema_errors(SCHEMAS[name](), {} if document is None else document):
        for where, message in describe_all(error):
            problems.append({"path": dotted(where) or "(the document)", "message": message})
    problems.sort(key=lambda p: p["path"])
    data = {"file": str(path), "schema": name, "valid": not problems, "problems": problems}
    if problems:
        lines = [f"INVALID: {path} against the {name!r} schema:"] + [f"  {p['path']}: {p['message']}" for p in problems]
        command.emit(data, "\n".join(lines))
        raise SystemExit(EXIT_FAILED)
    command.emit(data, f"OK: {path} is valid against the {name!r} schema")
