"""How static files are stored when collected."""

from __future__ import annotations

from whitenoise.storage import CompressedManifestStaticFilesStorage


class StaticFilesStorage(CompressedManifestStaticFilesStorage):
    """Hashed names and pre-compressed copies, made once by `collectstatic` at set-up, so WhiteNoise
    serves each file with a far-future cache header. Before anything is collected (a gateway
    started without set-up, until its start collects them: gateway.http.static_collection), a
    template's `{% static %}` names the file unhashed instead of failing the page; not strict
    either where a file is missing from the manifest."""

    manifest_strict = False

    def stored_name(self, name: str) -> str:
        # Nothing collected (no manifest): hashing would look for the file in STATIC_ROOT, find
        # nothing and fail the whole page with a 500. The unhashed name lets the page render.
        if not self.hashed_files:
            return name
        return str(super().stored_name(name))
