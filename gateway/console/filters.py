"""The job list's filters. Each reads an index (ledger/models/jobs.py names them), and the
choices of the plugin, submitter and pipeline filters come from a loose index scan, one index
seek per distinct value, never a `SELECT DISTINCT` over a million rows."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.db import connection, models
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest
from django.utils import timezone

from ledger import sql
from ledger.models import EventContext, Job
from ledger.states import JobStatus

# Statuses a person looks for when something went wrong.
PROBLEMS = (JobStatus.FAILED, JobStatus.TIMED_OUT, JobStatus.DEAD)
# Up to this many hops, a pipeline's jobs are read by context id and sorted (PipelineFilter).
FEW_HOPS = 10_000
# More distinct values than this are not a useful filter list; the search box finds the rest.
MAX_CHOICES = 100
WINDOWS = {"1h": ("Last hour", timedelta(hours=1)), "24h": ("Last 24 hours", timedelta(days=1))}
WINDOWS |= {"7d": ("Last 7 days", timedelta(days=7)), "30d": ("Last 30 days", timedelta(days=30))}


def distinct_values(model: type[models.Model], field: str, limit: int = MAX_CHOICES) -> list[str]:
    """The distinct non-null values of an indexed column, smallest first, one index seek per value
    (ledger.sql.distinct_values)."""
    column = str(model._meta.get_field(field).column)  # type: ignore[union-attr]  # a concrete field
    with connection.cursor() as cursor:
        cursor.execute(sql.distinct_values(model._meta.db_table, column), [limit])
        return [row[0] for row in cursor.fetchall()]


class ChoiceFilter(admin.SimpleListFilter):
    """An exact-match filter on one field whose choices are its distinct values."""

    model: type[models.Model] = Job
    field = ""

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(value, value) for value in distinct_values(self.model, self.field)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(**{self.field: value}) if value else queryset


class StatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [*((s.value, s.value) for s in JobStatus), ("problem", "failed, timed out or dead")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == "problem":
            return queryset.filter(status__in=PROBLEMS)
        return queryset.filter(status=value) if value else queryset


class PluginFilter(ChoiceFilter):
    title = "plugin"
    parameter_name = "plugin"
    field = "plugin"


class SubmitterFilter(ChoiceFilter):
    title = "submitted by"
    parameter_name = "submitted_by"
    field = "submitted_by"


class PipelineFilter(admin.SimpleListFilter):
    """Jobs that ran as a step of a pipeline: those whose event_context row names it.

    Two plans, chosen by how many hops the pipeline has (counted up to a bound, through the
    pipeline index alone): a pipeline with few hops has its jobs read by context id and sorted
    (cost: its hops); one with many has the newest jobs read in order, each checked against its
    context row (cost: the jobs read until a page is found, few when the pipeline is common).
    Either plan alone is slow for the other kind (measured: docs/performance.md, "Audit console")."""

    title = "pipeline"
    parameter_name = "pipeline"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in distinct_values(EventContext, "pipeline_name")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        hops = EventContext.objects.filter(pipeline_name=value)
        if hops[:FEW_HOPS].count() < FEW_HOPS:
            return queryset.filter(event_context_id__in=hops.values("id"))
        return queryset.filter(Exists(hops.filter(pk=OuterRef("event_context_id"))))


class CreatedFilter(admin.SimpleListFilter):
    title = "created"
    parameter_name = "created"
    field = "created_at"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(key, label) for key, (label, _) in WINDOWS.items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        window = WINDOWS.get(self.value() or "")
        return queryset.filter(**{f"{self.field}__gte": timezone.now() - window[1]}) if window else queryset
