"""The console's own door, read in the console: lockouts (django-axes' attempt rows: a username and
address with its failures, locked or not) with the operator's Unlock, every failed login, and every
login. Both roles read them; only an operator unlocks (ledger/roles.py)."""

from __future__ import annotations

from typing import Any

from axes.conf import settings
from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from gateway.console.admin.actions import Action, ActionsAdmin
from gateway.console.admin.base import LedgerAdmin
from gateway.console.filters import CreatedFilter
from gateway.console.render import badge
from gateway.operations import Actor
from gateway.operations.accounts import attempts_counted, is_locked, locked_attempts, unlock


def _unlock(attempt: AccessAttempt, actor: Actor) -> str:
    unlock(attempt.username, attempt.ip_address)
    return f"unlocked: {attempt.username} may log in from {attempt.ip_address} again"


class LockedFilter(admin.SimpleListFilter):
    title = "locked out"
    parameter_name = "locked"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "locked out now"), ("no", "not locked out")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        locked = locked_attempts(timezone.now()).values("pk")
        if self.value() == "yes":
            return queryset.filter(pk__in=locked)
        return queryset.exclude(pk__in=locked) if self.value() == "no" else queryset


class AttemptTimeFilter(CreatedFilter):
    title = "when"
    parameter_name = "when"
    field = "attempt_time"


class ByUsername(LedgerAdmin):
    """Searched by a whole username, through its index."""

    search_fields = ("username",)
    search_help_text = "A whole username."

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        term = search_term.strip()
        return (queryset.filter(username=term) if term else queryset), False


@admin.register(AccessAttempt)
class LockoutAdmin(ByUsername, ActionsAdmin):
    """One row per username, address and browser that failed to log in within the cool-off."""

    console_actions = (
        Action(
            name="unlock",
            label="Unlock",
            permission="axes.change_accessattempt",
            explain="The failed logins of this username from this address count 0 again: it may log in "
            "from there at once, without waiting for the cool-off. The failed-login records stay.",
            eligible=lambda attempt: attempt.failures_since_start > 0,
            refusal="it has no failed logins to clear",
            perform=_unlock,
        ),
    )
    list_display = ("username", "ip_address", "state", "failures_since_start", "attempt_time", "user_agent")
    list_filter = (LockedFilter,)
    ordering = ("-attempt_time",)
    fields = ("username", "ip_address", "state", "failures_since_start", "attempt_time", "user_agent", "path_info")
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return attempts_counted(timezone.now())

    @admin.display(description="state")
    def state(self, attempt: AccessAttempt) -> SafeString:
        if is_locked(attempt, timezone.now()):
            until = attempt.attempt_time + settings.AXES_COOLOFF_TIME
            return format_html("{} until {}", badge("locked out"), f"{until:%Y-%m-%d %H:%M:%S}")
        return format_html("{} of {} failures", attempt.pair_failures or 0, settings.AXES_FAILURE_LIMIT)


@admin.register(AccessFailureLog)
class FailedLoginAdmin(ByUsername):
    """Every failed login: who was tried, from where, and whether the pair was locked out by it."""

    list_display = ("attempt_time", "username", "ip_address", "outcome", "path_info", "user_agent")
    list_filter = (AttemptTimeFilter, "locked_out")
    # The id follows the time and is the primary key: a page of a long list costs what a short one does.
    ordering = ("-id",)
    sortable_by = ()
    fields = ("attempt_time", "username", "ip_address", "outcome", "path_info", "user_agent", "http_accept")
    readonly_fields = fields

    @admin.display(description="outcome")
    def outcome(self, failure: AccessFailureLog) -> SafeString:
        return badge("locked out" if failure.locked_out else "failed")


@admin.register(AccessLog)
class LoginAdmin(ByUsername):
    """Every login to the console, and when it logged out."""

    list_display = ("attempt_time", "username", "ip_address", "logout_time", "user_agent")
    ordering = ("-id",)
    sortable_by = ()
    fields = ("attempt_time", "username", "ip_address", "logout_time", "user_agent", "path_info")
    readonly_fields = fields
