"""A read-only audit console over every ledger table."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from ledger.models import (
    EventContext,
    Job,
    JobLog,
    JobStopwatch,
    JobTransition,
    PluginFact,
    PluginInstanceRecord,
    PluginState,
    WorkerInstance,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = ("id", "plugin", "command", "status", "attempt", "submitted_by", "created_at", "completed_at")
    list_filter = ("status", "plugin", "command", "submitted_by")
    search_fields = ("id", "dedupe_key", "last_error", "parent_job_id")
    date_hierarchy = "created_at"


@admin.register(JobTransition)
class JobTransitionAdmin(ReadOnlyAdmin):
    list_display = ("job_id", "from_status", "to_status", "reason", "worker", "attempt", "created_at")
    list_filter = ("to_status",)
    search_fields = ("job_id", "reason")


@admin.register(JobLog)
class JobLogAdmin(ReadOnlyAdmin):
    list_display = ("job_id", "plugin", "command", "status", "attempt", "completed_at", "last_error")
    list_filter = ("status", "plugin")
    search_fields = ("job_id", "last_error", "stderr", "result")


@admin.register(EventContext)
class EventContextAdmin(ReadOnlyAdmin):
    list_display = ("id", "pipeline_name", "step_id", "parent_id", "created_at")
    search_fields = ("id", "pipeline_name", "step_id")


@admin.register(PluginFact)
class PluginFactAdmin(ReadOnlyAdmin):
    list_display = ("seq", "plugin_name", "fact_type", "command", "job_id", "created_at")
    list_filter = ("plugin_name", "fact_type")


@admin.register(PluginState)
class PluginStateAdmin(ReadOnlyAdmin):
    list_display = ("plugin_name", "updated_at")


@admin.register(JobStopwatch)
class JobStopwatchAdmin(ReadOnlyAdmin):
    list_display = ("job_id", "plugin", "attempt", "dur_ns", "runtime_pre_ns", "runtime_post_ns", "status")
    list_filter = ("plugin", "status")


@admin.register(WorkerInstance)
class WorkerInstanceAdmin(ReadOnlyAdmin):
    list_display = ("id", "hostname", "pid", "state", "started_at", "heartbeat_at", "stopped_at")
    list_filter = ("state", "hostname")


@admin.register(PluginInstanceRecord)
class PluginInstanceAdmin(ReadOnlyAdmin):
    list_display = ("name", "health", "fingerprint", "init_job_id", "updated_at")
