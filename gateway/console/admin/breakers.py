"""Circuit breakers with their transition history, and the operator's Reset; schedule entries with
their next run, last firing and why one is paused, and the operator's Pause and Resume."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from gateway.console.admin.actions import Action, ActionsAdmin
from gateway.console.admin.base import LedgerAdmin, badge_column, job_column, target_column, text_column
from gateway.console.render import badge, job_link
from gateway.operations import Actor, resume_schedule
from gateway.runtime import RUNTIME
from ledger.models import BreakerState, CircuitBreaker, CircuitBreakerTransition, ScheduleEntry
from ledger.states import ActionRefused

HISTORY_ROWS = 50


def _reset(breaker: CircuitBreaker, actor: Actor) -> str:
    if not CircuitBreaker.objects.filter(pk=breaker.pk).reset(by=str(actor)):
        raise ActionRefused("it closed on its own meanwhile")
    return "reset: closed, failure count 0"


def _pause(entry: ScheduleEntry, actor: Actor) -> str:
    entry.pause_by_hand(by=str(actor), now=timezone.now())
    return "paused (kept across restarts and reloads)"


def _resume(entry: ScheduleEntry, actor: Actor) -> str:
    resume_schedule(RUNTIME.get(), entry, now=timezone.now())
    return f"resumed; next run {entry.next_run_at:%Y-%m-%d %H:%M:%S}" if entry.next_run_at else "resumed"


class TrippedFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("tripped", "open or half-open"), *((s.value, s.value) for s in BreakerState)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == "tripped":
            return queryset.exclude(state=BreakerState.CLOSED)
        return queryset.filter(state=value) if value else queryset


@admin.register(CircuitBreaker)
class CircuitBreakerAdmin(ActionsAdmin):
    console_actions = (
        Action(
            name="reset",
            label="Reset",
            permission="ledger.reset_breaker",
            explain="The breaker closes with a failure count of 0: scheduled runs of this plugin command "
            "are enqueued again. Reset after fixing what made it trip.",
            eligible=lambda b: b.state != BreakerState.CLOSED,
            refusal="it is closed already",
            perform=_reset,
        ),
    )
    list_display = ("target", "state_badge", "failure_count", "opened_at", "last_failure_at", "last_job", "updated_at")
    list_filter = (TrippedFilter,)
    ordering = ("plugin", "command")
    fields = ("target", "state_badge", "failure_count", "opened_at", "last_failure_at", "last_job", "history")
    readonly_fields = fields

    target = target_column(ordering="plugin")
    state_badge = badge_column("state", "state")
    last_job = job_column("last_job_id", "last job (while half-open: the probe)")

    @admin.display(description="transition history (newest first)")
    def history(self, breaker: CircuitBreaker) -> SafeString:
        rows = CircuitBreakerTransition.objects.filter(plugin=breaker.plugin, command=breaker.command)
        rows = rows.order_by("-created_at")[:HISTORY_ROWS]
        body = format_html_join(
            "",
            "<tr><td>{}</td><td>{} → {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    f"{t.created_at:%Y-%m-%d %H:%M:%S}",
                    badge(t.from_state),
                    badge(t.to_state),
                    t.reason,
                    t.failure_count,
                    job_link(t.job_id),
                    t.actor or "",
                )
                for t in rows
            ),
        )
        if not body:
            return format_html("<p>{}</p>", "No transitions yet.")
        return format_html(
            '<table class="ductile-table"><thead><tr><th>when</th><th>change</th><th>reason</th>'
            "<th>failures</th><th>job</th><th>by</th></tr></thead><tbody>{}</tbody></table>",
            body,
        )


@admin.register(CircuitBreakerTransition)
class CircuitBreakerTransitionAdmin(LedgerAdmin):
    list_display = ("created_at", "target", "from_state", "to", "reason", "failure_count", "job", "actor")
    list_filter = ("reason",)
    ordering = ("-created_at",)

    target = target_column()
    to = badge_column("to_state", "to state")
    job = job_column()


@admin.register(ScheduleEntry)
class ScheduleEntryAdmin(ActionsAdmin):
    console_actions = (
        Action(
            name="pause",
            label="Pause",
            permission="ledger.pause_schedule",
            explain="The entry stops firing until resumed, across restarts and config reloads.",
            eligible=lambda e: e.can_pause,
            refusal="only an active entry can be paused",
            perform=_pause,
            danger=True,
        ),
        Action(
            name="resume",
            label="Resume",
            permission="ledger.pause_schedule",
            explain="The entry fires again from its next run after now; runs missed while paused are not caught up.",
            eligible=lambda e: e.can_resume,
            refusal="only an entry paused by hand can be resumed",
            perform=_resume,
        ),
    )
    list_display = (
        "address",
        "command",
        "state",
        "why",
        "next_run_at",
        "last_fired_at",
        "last_job",
        "last_success_at",
    )
    list_filter = ("status", "plugin")
    ordering = ("plugin", "schedule_id")
    search_fields = ("plugin", "schedule_id")
    fields = (
        "address",
        "command",
        "state",
        "why",
        "next_run_at",
        "last_fired_at",
        "last_job",
        "last_success_at",
        "last_success_job",
        "fingerprint",
        "updated_at",
    )
    readonly_fields = fields

    @admin.display(description="entry", ordering="plugin")
    def address(self, entry: ScheduleEntry) -> str:
        return entry.address

    state = badge_column("status")
    why = text_column("reason", "why paused")
    last_job = job_column("last_job_id", "last job")
    last_success_job = job_column("last_success_job_id", "last successful job")
