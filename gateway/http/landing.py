"""`/` for a person (issue 36): the landing page a browser gets where an agent gets the discovery
document (gateway.http.api.views.Root negotiates). Where to go (the console, the dashboard, the
API's documents, the guide when the gateway serves one), and the gateway as `/healthz` tells it to
anyone: status, version, uptime, figures, the config directory. Which config that is (its
fingerprint) only for a console login that may read config_snapshots, as the console shows it.

Server-rendered in the console's frame and stylesheets, with no script of its own: the page
works without JavaScript, and its Content-Security-Policy allows nothing but the site's own files."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.urls import Resolver404, resolve, reverse
from django.utils import timezone
from django.utils.timesince import timesince
from rest_framework.renderers import BaseRenderer

from ledger.models import ConfigSnapshot

TEMPLATE = "landing/index.html"
GUIDE = "/guide/"
# The admin's theme script is the only one on the page; its logout button posts to the console.
CSP = (
    "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
# Health changes by the second: a browser asks again rather than show an old page.
PAGE_HEADERS = {"Content-Security-Policy": CSP, "Cache-Control": "no-cache"}


class LandingPage(BaseRenderer):
    """`text/html` at `/`: the view's data is the template's context."""

    media_type = "text/html"
    format = "html"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> str:
        # Django's request, whose user is the console's session, not the API's token.
        request = renderer_context["request"]._request
        return render_to_string(TEMPLATE, data, request=request)


@dataclass(frozen=True)
class Link:
    label: str
    href: str
    about: str


def people_links(user: Any) -> list[Link]:
    login = "" if user.is_authenticated else " (log in)"
    links = [
        Link("Audit console", reverse("admin:index"), f"every job's story, the queue, retries and replays{login}"),
        Link("Live dashboard", reverse("dashboard:overview"), f"the queue, failures and breakers, live{login}"),
        Link("Pipelines", reverse("dashboard:pipelines"), f"each pipeline drawn, coloured by its latest runs{login}"),
    ]
    if guide_served():
        links.append(Link("User's guide", GUIDE, "getting started, plugins, pipelines, configuration, operations"))
    return links


def agent_links() -> list[Link]:
    return [
        Link("API docs", reverse("docs"), "every endpoint, tried from the browser (Swagger UI)"),
        Link("OpenAPI document", reverse("openapi"), "the API and every plugin command, OpenAPI 3.1"),
        Link("Health", reverse("healthz"), "what this page shows, as JSON"),
        Link("Skills", reverse("skills"), "what an agent may call, with each command's tier"),
        Link("Plugins", reverse("plugins"), "the loaded plugins and their commands"),
        Link("Discovery document", reverse("root") + "?format=json", "this page for agents, as GET / answers them"),
    ]


def guide_served() -> bool:
    """Whether the gateway serves the user's guide: linked only where it answers."""
    try:
        resolve(GUIDE)
    except Resolver404:
        return False
    return True


def may_read_config(user: Any) -> bool:
    """A console login that may read config_snapshots. The fingerprint covers files that hold
    secrets (a `.env`): not for every visitor, whom `/healthz` tells only the directory."""
    return bool(user.is_active and user.is_staff and user.has_perm("ledger.view_configsnapshot"))


def config_in_force(config_dir: str) -> ConfigSnapshot | None:
    """The newest config_snapshots row of this config directory: the config `system start` or its
    latest reload loaded."""
    return ConfigSnapshot.objects.filter(config_dir=config_dir).order_by("-loaded_at", "-id").first()


def landing_context(
    request: HttpRequest, document: dict[str, Any], health: dict[str, Any] | None, refusal: str | None
) -> dict[str, Any]:
    """The page's context: the console's frame, the discovery document, and `/healthz`'s answer
    (`health`) or the words of its 503 (`refusal`)."""
    # DRF put the API's user there (the token's; None without one): the page is the session's person.
    request.user = user = get_user(request)
    now = timezone.now()
    reads_config = may_read_config(user)
    return {
        **admin.site.each_context(request),
        "title": "Ductile gateway",
        "is_nav_sidebar_enabled": False,
        "document": document,
        "uptime": timesince(now - timedelta(seconds=document["uptime_seconds"]), now),
        "health": health,
        "refusal": refusal,
        "reads_config": reads_config,
        "snapshot": config_in_force(health["config_path"]) if health and reads_config else None,
        "people": people_links(user),
        "agents": agent_links(),
    }
