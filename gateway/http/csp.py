"""A Content-Security-Policy on every page the gateway serves to a person: the audit console
(/admin/), the dashboard, the API's docs (/docs) and error pages. The landing page (`/`) sets a
stricter one of its own (gateway/http/landing.py), which is kept.

Scripts come from the gateway's own origin only: no page has an inline script or an inline event
handler (Django's admin has none since 4.1, /docs loads its start-up script from `/docs?script=`),
so text that slipped past escaping still could not run. Styles may be inline: Mermaid writes a
`<style>` into each diagram it draws, Swagger UI's page carries one, and the job story indents each
hop by a `style="--depth: N"`; CSS cannot run code, and that is what the policy is for. Images may
be `data:` URIs (Swagger UI's icons). Streams and fetches go back to the same origin, frames and
plugins nowhere.

JSON answers get no header: a policy means nothing to an API client, and the check is one string
compare on the API's hot path.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponseBase

POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
HEADER = "Content-Security-Policy"


def content_security_policy(
    get_response: Callable[[HttpRequest], HttpResponseBase],
) -> Callable[[HttpRequest], HttpResponseBase]:
    def middleware(request: HttpRequest) -> HttpResponseBase:
        response = get_response(request)
        if response.get("Content-Type", "").startswith("text/html") and HEADER not in response:
            response[HEADER] = POLICY
        return response

    return middleware
