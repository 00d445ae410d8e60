"""Static files collected before the gateway serves pages, when set-up did not collect them."""

from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from django.conf import settings

# ManifestFilesMixin's manifest_name, named here so that the look costs no import of the storage.
MANIFEST = "staticfiles.json"


def collection_needed(root: Path, sources: Iterable[Path]) -> str | None:
    """Why the static files must be collected, or None: nothing is collected in `root`, or a file
    of `sources` (the project's static/) is newer than the collection, as set-up decides
    (scripts/_env.sh)."""
    try:
        collected = (root / MANIFEST).stat().st_mtime_ns
    except OSError:
        return "none were collected"
    for source in sources:
        for path in Path(source).rglob("*"):
            if path.is_file() and path.stat().st_mtime_ns > collected:
                return f"{path} changed since they were"
    return None


def collect_if_needed() -> None:
    """Before the web workers start (gunicorn's start check): collect the static files when they
    are not, or are behind static/. Why: the console's pages hash their files' names against the
    collection, and a gateway installed or checked out without set-up served every page as a 500.
    A collection that fails (a read-only directory) is said on stderr, and the API starts anyway:
    agents need no static files, and the pages then render without them (StaticFilesStorage)."""
    root = Path(settings.STATIC_ROOT)
    sources = [Path(p) for p in settings.STATICFILES_DIRS]
    why = collection_needed(root, sources)
    if why is None:
        return
    # Not at import: Django's management (~15 ms) only when the files must be collected, which a
    # set-up gateway's every start does not.
    import django
    from django.core.management import call_command

    try:
        # Why a lock: `system start` starts the API's and the webhook listener's gunicorns at once,
        # and two collections into one directory race; the second finds the first's work done.
        # The directory itself is locked: a lock file would be left beside it, or served in it.
        root.mkdir(parents=True, exist_ok=True)
        directory = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(directory, fcntl.LOCK_EX)
            if collection_needed(root, sources) is None:
                return
            django.setup()
            call_command("collectstatic", interactive=False, verbosity=0)
        finally:
            os.close(directory)
    except Exception as exc:  # whatever stops it, the API must start
        print(
            f"warning: static files not collected into {root} ({why}): {type(exc).__name__}: {exc};"
            " the console's pages are served without styles until `ductile collectstatic --noinput`"
            " succeeds (DUCTILE_STATIC_ROOT chooses the directory)",
            file=sys.stderr,
        )
        return
    print(f"static files collected into {root}: {why}", file=sys.stderr)
