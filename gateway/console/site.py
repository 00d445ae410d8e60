"""The audit console's admin site: "Ductile" with the gateway's name and version in the header
(templates/admin/base_site.html), an index that opens with what needs a person's eye, each figure
a link to the list it counts, and the config page."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, URLResolver, path, reverse
from django.utils import timezone

from gateway.console.config import config_context, lease_ttl
from gateway.console.filters import PROBLEMS
from gateway.operations.accounts import locked_attempts
from gateway.reports.nodes import unserved_plugins
from ledger.models import CircuitBreaker, Job, WorkerInstance


@dataclass(frozen=True)
class Figure:
    label: str
    value: int
    url: str
    alarming: bool  # worth a person's eye when not zero


def summary() -> list[Figure]:
    """Each figure one indexed count (ledger/models/jobs.py names the indexes); the lockouts are
    django-axes' attempt rows of the last cool-off, a short table."""
    now = timezone.now()
    jobs = reverse("admin:ledger_job_changelist")
    return [
        Figure("queued", Job.objects.queued().count(), f"{jobs}?status=queued", False),
        Figure("running", Job.objects.running().count(), f"{jobs}?status=running", False),
        Figure(
            "failed or dead, last 24 h",
            Job.objects.filter(status__in=PROBLEMS, created_at__gte=now - timedelta(days=1)).count(),
            f"{jobs}?status=problem&created=24h",
            True,
        ),
        Figure(
            "open circuit breakers",
            CircuitBreaker.objects.tripped().count(),
            reverse("admin:ledger_circuitbreaker_changelist") + "?state=tripped",
            True,
        ),
        Figure(
            "console logins locked out",
            locked_attempts(now).values("username", "ip_address").distinct().count(),
            reverse("admin:axes_accessattempt_changelist") + "?locked=yes",
            True,
        ),
        Figure(
            "live workers",
            WorkerInstance.objects.heartbeating(now, lease_ttl()).workers().count(),
            reverse("admin:ledger_workerinstance_changelist") + "?live=yes",
            False,
        ),
        unserved_figure(now),
    ]


def unserved_figure(now: datetime) -> Figure:
    """Plugins with queued jobs no live node runs, linked to those jobs (one plugin's, or every
    queued job when several plugins wait)."""
    unserved = unserved_plugins(now, lease_ttl())
    query = "?status=queued" + (f"&plugin={quote(unserved[0]['plugin'])}" if len(unserved) == 1 else "")
    return Figure("plugins no live node runs", len(unserved), reverse("admin:ledger_job_changelist") + query, True)


# What a section of the index is, where its app's own name does not say: shown under its title.
APP_DESCRIPTIONS = {
    "django_q": (
        "Housekeeping queue",
        "The gateway's own upkeep, not your jobs: the hourly retention prune and scheduled backups "
        "(service.backup), run on demand by system start's housekeeping cluster (django-q2). "
        "Plugin and pipeline jobs are under Execution ledger, Jobs.",
    ),
}


class ConsoleSite(admin.AdminSite):
    site_header = "Ductile"
    site_title = "Ductile"
    index_title = "Audit console"
    index_template = "admin/ductile/index.html"
    # The admin's "View site": the landing page, where a browser at `/` lands (gateway/http/landing.py).
    site_url = "/"
    # The lists are wide (a job has nine columns); the index and the breadcrumbs lead everywhere.
    enable_nav_sidebar = False

    def index(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> TemplateResponse:
        figures = summary() if request.user.has_perm("ledger.view_job") else []
        return super().index(request, {"figures": figures, **(extra_context or {})})

    def get_app_list(self, request: HttpRequest, app_label: str | None = None) -> list[Any]:
        apps = super().get_app_list(request, app_label)
        for app in apps:
            if app["app_label"] in APP_DESCRIPTIONS:
                app["name"], app["description"] = APP_DESCRIPTIONS[app["app_label"]]
        return apps

    def get_urls(self) -> list[URLResolver | URLPattern]:
        return [path("config/", self.admin_view(self.config_view), name="config"), *super().get_urls()]

    def config_view(self, request: HttpRequest) -> HttpResponse:
        if not request.user.has_perm("ledger.view_plugininstancerecord"):
            raise PermissionDenied
        context = {**self.each_context(request), "title": "Configuration", **config_context()}
        return TemplateResponse(request, "admin/ductile/config.html", context)
