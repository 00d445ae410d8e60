"""Whether a plugin's entrypoint can start on this machine: the interpreter its shebang names
(spec 000 §5.5: "Shebang line handles interpreter selection") must exist.

Why at load and not at the first spawn: a plugin whose interpreter is missing (`#!/usr/bin/env bun`
on a host without Bun) otherwise loads, is scheduled, and fails every attempt with env's exit 127;
skipped at load, `config check`, `plugin list` and `system doctor` name the reason before any job
runs, and strict mode refuses it as it refuses any enabled plugin that cannot run.

Only a missing interpreter is judged, and only when the line says plainly which one: a shebang
this module cannot read with certainty (env options it does not know) is left to the spawn, so a
plugin that can run is never skipped here.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# Linux reads at most this much of a shebang line (BINPRM_BUF_SIZE in recent kernels).
_SHEBANG_MAX = 256


def missing_interpreter(entrypoint: Path, search_path: str) -> str | None:
    """Why `entrypoint` cannot start, when its shebang's interpreter is not there (looked up on
    `search_path`, the PATH plugin processes get); None when it can, or when it is not a script."""
    try:
        with open(entrypoint, "rb") as file:
            head = file.read(_SHEBANG_MAX)
    except OSError:
        return None  # the manifest's own checks report an unreadable entrypoint
    if not head.startswith(b"#!"):
        return None
    line = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    words = line.split()
    if not words:
        return None
    shown = f"#!{line}"
    interpreter = words[0]
    if not interpreter.startswith("/"):
        return None  # the kernel resolves it against the spawner's working directory
    program: str | None = interpreter
    if os.path.basename(interpreter) == "env" and _present(interpreter, search_path):
        program = _env_program(words[1:])
    if program is None or _present(program, search_path):
        return None
    where = "does not exist" if "/" in program else f"is not on the plugins' PATH ({search_path})"
    return f"interpreter {program!r} {where} (entrypoint {entrypoint.name} starts with {shown!r})"


def _env_program(args: list[str]) -> str | None:
    """The program `env` would run with `args`, when that is certain: `-S` splits the rest into
    words (the kernel passes it as one), `NAME=value` assignments come before it. A `PATH=`
    assignment, any other option, or `-S`'s variables and escapes make it uncertain: nothing is
    judged then."""
    if args and args[0].startswith("-S"):
        rest = args[0][2:]
        args = ([rest] if rest else []) + args[1:]
    for arg in args:
        if arg.startswith("-") or arg.startswith("PATH=") or "$" in arg or "\\" in arg:
            return None
        if "=" not in arg:
            return arg
    return None


def _present(program: str, search_path: str) -> bool:
    """Whether the kernel (a path) or env (a name, looked up on `search_path`) finds `program`;
    a relative path (resolved against the spawner's working directory) is not judged."""
    if "/" not in program:
        return shutil.which(program, path=search_path) is not None
    if not program.startswith("/"):
        return True
    return os.path.isfile(program) and os.access(program, os.X_OK)
