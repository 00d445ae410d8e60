"""The other ledger tables an auditor reads, each linked to the jobs it is about: baggage hops,
the event log, plugin facts and state (as formatted JSON), workers (live or gone, by heartbeat),
plugin instances (health, fingerprint), and the console's own audit trail of who took which
action."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import quote
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from gateway.console.admin.base import JobIdSearch, LedgerAdmin, badge_column, job_column, json_column, text_column
from gateway.console.config import lease_ttl
from gateway.console.render import badge, job_link, linkify
from ledger.models import (
    ConfigSnapshot,
    EventContext,
    EventRecord,
    Job,
    PluginFact,
    PluginInstanceRecord,
    PluginState,
    WorkerInstance,
)
from ledger.models.workers import WorkerState

if TYPE_CHECKING:
    from django.contrib.admin.filters import _ListFilterChoices
    from django.contrib.admin.views.main import ChangeList


@admin.register(EventContext)
class EventContextAdmin(LedgerAdmin):
    """One row per pipeline hop: the baggage as it stood there (spec 001 §3.1)."""

    list_display = ("created_at", "id", "pipeline_name", "step_id", "parent")
    list_filter = ("pipeline_name",)
    ordering = ("-created_at",)
    sortable_by = ()
    search_fields = ("id",)
    search_help_text = "A whole context id."
    fields = ("id", "pipeline_name", "step_id", "parent", "jobs", "created_at", "baggage")
    readonly_fields = fields

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        term = search_term.strip().lower()
        return (queryset.filter(pk=term) if term else queryset), False

    @admin.display(description="parent hop")
    def parent(self, row: EventContext) -> SafeString | str:
        if not row.parent_id:
            return "-"
        # An absolute address: the column shows on the list and on a hop's own page, one and two
        # levels apart ("../../" led from the list to /admin/<id>/change/, a 404).
        url = reverse("admin:ledger_eventcontext_change", args=[quote(row.parent_id)])
        return format_html('<a href="{}">{}</a>', url, row.parent_id[:8])

    @admin.display(description="jobs at this hop (a replay shares its original's)")
    def jobs(self, row: EventContext) -> SafeString:
        ids = Job.objects.filter(event_context_id=row.id).order_by("created_at").values_list("id", flat=True)[:20]
        return format_html(" ".join(["{}"] * len(ids)), *(job_link(i) for i in ids)) if ids else SafeString("-")

    baggage = json_column("accumulated_json", "baggage")


@admin.register(EventRecord)
class EventRecordAdmin(JobIdSearch):
    """`event_log`: root events, the events plugins emitted, preflight decisions, lifecycle signals."""

    list_display = ("id", "created_at", "type", "source", "job")
    ordering = ("-id",)
    sortable_by = ()
    fields = ("id", "event_id", "type", "source", "job", "created_at", "data")
    readonly_fields = fields

    job = job_column()
    data = json_column("payload", "payload")


@admin.register(PluginFact)
class PluginFactAdmin(JobIdSearch):
    list_display = ("seq", "plugin_name", "fact_type", "command", "job", "created_at")
    list_filter = ("plugin_name",)
    ordering = ("-id",)
    sortable_by = ()
    fields = ("seq", "plugin_name", "fact_type", "command", "job", "created_at", "fact")
    readonly_fields = fields

    job = job_column()
    fact = json_column("fact_json", "fact")


@admin.register(PluginState)
class PluginStateAdmin(LedgerAdmin):
    list_display = ("plugin_name", "updated_at")
    ordering = ("plugin_name",)
    fields = ("plugin_name", "updated_at", "snapshot")
    readonly_fields = fields

    snapshot = json_column("state", "state (the compatibility view of the latest fact)")


@admin.register(ConfigSnapshot)
class ConfigSnapshotAdmin(LedgerAdmin):
    """Each distinct config the gateway started or reloaded on, redacted (ledger/models/config_snapshots.py)."""

    list_display = ("loaded_at", "fingerprint", "reason", "loaded_by", "config_dir")
    list_filter = ("reason",)
    ordering = ("-loaded_at", "-id")
    sortable_by = ()
    search_fields = ("fingerprint",)
    search_help_text = "The start of a fingerprint (blake3:…)."
    fields = ("fingerprint", "loaded_at", "reason", "loaded_by", "config_dir", "file_list", "config")
    readonly_fields = fields

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        term = search_term.strip()
        return (queryset.filter(fingerprint__startswith=term) if term else queryset), False

    file_list = json_column("files", "files (path, tier, blake3)")
    config = json_column("content", "config (redacted)")


class LiveFilter(admin.SimpleListFilter):
    """The workers list opens on the live daemons: the rows of stopped ones stay for the record
    (what claimed a job names its worker), one click away."""

    title = "liveness"
    parameter_name = "live"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "live (heartbeat within a lease)"), ("no", "gone or silent"), ("all", "all")]

    def value(self) -> str:
        return super().value() or "yes"

    def choices(self, changelist: ChangeList) -> Iterator[_ListFilterChoices]:
        # No "All" link of Django's own: without the parameter the list is the live one.
        for value, label in self.lookup_choices:
            yield {
                "selected": self.value() == value,
                "query_string": changelist.get_query_string({self.parameter_name: value}),
                "display": label,
            }

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        live = WorkerInstance.objects.heartbeating(timezone.now(), lease_ttl()).values("pk")
        if self.value() == "yes":
            return queryset.filter(pk__in=live)
        return queryset.exclude(pk__in=live) if self.value() == "no" else queryset


@admin.register(WorkerInstance)
class WorkerInstanceAdmin(LedgerAdmin):
    """The cluster's nodes: each worker daemon with its host, group, version and slots, and each
    process that claims no jobs (a `system start` for its API, scheduler or housekeeping; a
    standalone scheduler) with its roles."""

    list_display = (
        "id",
        "liveness",
        "hostname",
        "pid",
        "roles",
        "group",
        "version",
        "slots",
        "plugins",
        "started_at",
        "heartbeat_at",
        "holding",
    )
    list_filter = (LiveFilter, "roles", "hostname", "worker_group", "version")
    ordering = ("-started_at",)

    @admin.display(description="group", ordering="worker_group")
    def group(self, worker: WorkerInstance) -> str | None:
        return worker.worker_group or None

    @admin.display(description="slots", ordering="threads")
    def slots(self, worker: WorkerInstance) -> int:
        return worker.threads

    @admin.display(description="live?")
    def liveness(self, worker: WorkerInstance) -> SafeString:
        if worker.state != WorkerState.RUNNING:
            return badge("gone")
        fresh = worker.heartbeat_at >= timezone.now() - timedelta(seconds=lease_ttl())
        return badge("live" if fresh else "silent")

    @admin.display(description="jobs it holds")
    def holding(self, worker: WorkerInstance) -> int:
        return Job.objects.running().filter(claimed_by=worker.id).count()


@admin.register(PluginInstanceRecord)
class PluginInstanceAdmin(LedgerAdmin):
    list_display = ("name", "health_badge", "fingerprint", "init_job", "error", "updated_at")
    list_filter = ("health",)
    ordering = ("name",)
    fields = ("name", "health_badge", "fingerprint", "init_job", "error", "updated_at")
    readonly_fields = fields

    error = text_column("last_error", "last error")
    health_badge = badge_column("health", "health")
    init_job = job_column("init_job_id", "init job")


@admin.register(LogEntry)
class ConsoleActionAdmin(LedgerAdmin):
    """Who took which action in the console, on what, when (the admin's own LogEntry rows)."""

    list_display = ("action_time", "user", "record", "what")
    list_filter = ("user",)
    ordering = ("-action_time",)
    list_select_related = ("user", "content_type")

    @admin.display(description="record")
    def record(self, entry: LogEntry) -> SafeString | str:
        url = entry.get_admin_url()
        label = f"{entry.content_type.name if entry.content_type else ''}: {entry.object_repr}"
        return format_html('<a href="{}">{}</a>', url, label) if url else label

    @admin.display(description="what happened")
    def what(self, entry: LogEntry) -> SafeString:
        return linkify(entry.get_change_message())
