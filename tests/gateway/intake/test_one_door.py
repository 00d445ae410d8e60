"""Every job enters through the intake: no module of the gateway builds a `JobSpec` itself or
patches one the intake built (issue 37: the executor and the relay receiver once did, with
`dataclasses.replace`, so a child's parent, event or actor were set outside the door)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

GATEWAY = Path(__file__).resolve().parents[3] / "gateway"
DOOR = GATEWAY / "intake"


def _modules() -> list[Path]:
    return [p for p in GATEWAY.rglob("*.py") if DOOR not in p.parents and "migrations" not in p.parts]


def _offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names_spec = any(isinstance(n, ast.Name) and n.id == "JobSpec" for n in ast.walk(tree)) or any(
        isinstance(n, ast.alias) and n.name == "JobSpec" for n in ast.walk(tree)
    )
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name == "JobSpec":
            found.append(f"{path.name}:{node.lineno}: builds a JobSpec")
        # `replace(spec, ...)`, or any `replace(...)` in a module that handles JobSpecs: the ways a
        # spec was patched before.
        first = node.args[0] if node.args else None
        patches_spec = isinstance(first, ast.Name) and "spec" in first.id.lower()
        if name == "replace" and (names_spec or patches_spec) and not _is_str_method(node):
            found.append(f"{path.name}:{node.lineno}: dataclasses.replace of a JobSpec")
    return found


def _is_str_method(call: ast.Call) -> bool:
    """`text.replace(old, new)`: two positional arguments and no keywords, unlike dataclasses'."""
    return len(call.args) == 2 and not call.keywords


def test_no_module_outside_the_intake_builds_or_patches_a_job_spec() -> None:
    offences = [o for path in _modules() for o in _offences(path)]
    assert offences == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from ledger.models import JobSpec\nJobSpec(plugin='x')\n", 1),
        ("from dataclasses import replace\nfrom ledger.models import JobSpec\nreplace(spec, actor='a')\n", 1),
        ("from dataclasses import replace\nreplace(spec, actor='a')\n", 1),
        ("from dataclasses import replace\nreplace(call, headers={})\n", 0),
        ("from ledger.models import JobSpec\nname = 'a-b'.replace('-', '_')\n", 0),
    ],
)
def test_the_check_sees_what_it_forbids(tmp_path: Path, source: str, expected: int) -> None:
    module = tmp_path / "probe.py"
    module.write_text(source)
    assert len(_offences(module)) == expected
