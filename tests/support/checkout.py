"""This checkout (REPO), and a fresh clone of it, for tests that run the repository's own scripts as
a newcomer or CI would (`./scripts/demo`, `./scripts/test`).

The clone is of HEAD with this checkout's uncommitted changes to tracked files laid over it, so a
change is tested before it is committed; a new file must be `git add`ed to be seen, as in CI.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def fresh_clone(target: Path) -> Path:
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(target)], check=True)
    changed = subprocess.run(
        ["git", "-C", str(REPO), "diff", "--name-only", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.split()
    for name in changed:
        source, copy = REPO / name, target / name
        if source.exists():
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy)
        else:
            copy.unlink(missing_ok=True)
    return target
