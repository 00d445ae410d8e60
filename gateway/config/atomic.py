"""Writing a config file so that a crash or a full disk never leaves it half-written."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def write_atomic(path: Path, text: str, *, mode: int | None = None) -> None:
    """Replace `path` with `text`: a temp file in the same directory, fsynced, then renamed over
    it. The file keeps its permission bits (or gets `mode`); a new one is 0600, as the spec has
    config files by default ("operators may relax permissions explicitly"). On any failure it is
    untouched."""
    if mode is None:
        mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o600
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
