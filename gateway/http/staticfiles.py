"""How static files are stored when collected."""

from __future__ import annotations

from whitenoise.storage import CompressedManifestStaticFilesStorage


class StaticFilesStorage(CompressedManifestStaticFilesStorage):
    """Hashed names and pre-compressed copies, made once by `collectstatic` at set-up, so WhiteNoise
    serves each file with a far-future cache header. Not strict: before anything is collected (a
    test rendering a page in-process) a template's `{% static %}` names the file unhashed instead
    of failing the page."""

    manifest_strict = False
