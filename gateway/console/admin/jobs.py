"""Jobs and the rows about them: the list an auditor filters, the page that tells one job's whole
story, and the operator's Replay, Cancel and Retry now."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from gateway.console.admin.actions import Action, ActionsAdmin
from gateway.console.admin.base import (
    JobIdSearch,
    LedgerChangeList,
    badge_column,
    job_column,
    json_column,
    target_column,
    text_column,
)
from gateway.console.filters import CreatedFilter, PipelineFilter, PluginFilter, StatusFilter, SubmitterFilter
from gateway.console.render import duration, job_url, json_tree, linkify, nanoseconds, short_id
from gateway.console.safety import Safe, safe_text
from gateway.console.story import read_story, where
from gateway.operations import Actor, replay
from gateway.reports import parse_response
from gateway.runtime import RUNTIME
from ledger.models import EventContext, Job, JobAttempt, JobLog, JobStopwatch, JobTransition

# Search results per kind (id prefix, dedupe key, error text).
ERROR_SEARCH_LIMIT = 1000
# Error-text search reads the errors of this many of the newest failed jobs.
ERROR_SEARCH_WINDOW = 20_000
ID_CHARS = frozenset("0123456789abcdef-")


def _replay(job: Job, actor: Actor) -> str:
    return f"replayed as job {replay(RUNTIME.get(), job, by=actor)}"


def _cancel(job: Job, actor: Actor) -> str:
    job.cancel(by=str(actor))
    return "cancelled (dead, never run)"


def _retry(job: Job, actor: Actor) -> str:
    job.retry_now(by=str(actor))
    return f"queued again for attempt {job.attempt}/{job.max_attempts}"


JOB_ACTIONS = (
    Action(
        name="replay",
        label="Replay",
        permission="ledger.replay_job",
        explain="A new job runs the same step again from the stored context (same event, payload and "
        "baggage, same parent), and the pipeline continues from it. The original is kept as it is.",
        eligible=lambda job: job.can_replay,
        refusal="only a finished job can be replayed",
        perform=_replay,
    ),
    Action(
        name="cancel",
        label="Cancel",
        permission="ledger.cancel_job",
        explain="The queued job ends dead without running; nothing that would have followed it runs.",
        eligible=lambda job: job.can_cancel,
        refusal="only a queued job can be cancelled",
        perform=_cancel,
        danger=True,
    ),
    Action(
        name="retry",
        label="Retry now",
        permission="ledger.retry_job",
        explain="The job is queued again for one more attempt, due at once (a job that had used all its "
        "attempts gets exactly one more).",
        eligible=lambda job: job.can_retry,
        refusal="only a failed, timed out or dead job can be retried",
        perform=_retry,
    ),
)


class JobChangeList(LedgerChangeList):
    """Reads the page's pipeline steps in one query (a job names its event_context row by id, not
    by foreign key: retention prunes the two independently)."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        ids = {job.event_context_id for job in self.result_list if job.event_context_id}
        contexts = EventContext.objects.in_bulk(ids)
        for job in self.result_list:
            job.console_where = where(contexts.get(job.event_context_id or ""))


@admin.register(Job)
class JobAdmin(ActionsAdmin):
    console_actions = JOB_ACTIONS
    change_form_template = "admin/ledger/job/story.html"
    list_display = ("short", "state", "target", "step", "attempts", "submitted_by", "created_at", "took", "error")
    list_display_links = ("short",)
    list_filter = (StatusFilter, PluginFilter, PipelineFilter, SubmitterFilter, CreatedFilter)
    ordering = ("-created_at",)
    sortable_by = ("created_at",)
    search_fields = ("id",)
    search_help_text = (
        f"A job id (whole, or its first characters), a dedupe key (exact), or words in the error of one "
        f"of the newest {ERROR_SEARCH_WINDOW:,} failed jobs (older ones: `ductile job logs --query`)."
    )

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return JobChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        """Three index reads whose ids are combined, instead of one OR of `LIKE '%…%'` that reads
        every row: id prefix (primary key range), dedupe key (its index), error text (the failed
        jobs' index, newest first)."""
        term = search_term.strip()
        if not term:
            return queryset, False
        ids: set[str] = set()
        prefix = term.lower().rstrip("-")
        if len(prefix) >= 4 and set(prefix) <= ID_CHARS:
            # The range makes it an index read on either backend; `startswith` keeps it exact.
            upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
            ids |= set(
                Job.objects.filter(pk__gte=prefix, pk__lt=upper, pk__startswith=prefix).values_list("pk", flat=True)[
                    :ERROR_SEARCH_LIMIT
                ]
            )
        ids |= set(Job.objects.filter(dedupe_key=term).values_list("pk", flat=True)[:ERROR_SEARCH_LIMIT])
        # Why in Python over a bounded window: a `LIKE '%…%'` reads every failed row whatever
        # its LIMIT when the words are rare, and an index holding the text would break on
        # PostgreSQL for an error longer than its index row limit.
        newest = Job.objects.filter(last_error__isnull=False).order_by("-created_at")
        words, found, safe = term.casefold(), 0, Safe.current()
        for pk, error in newest.values_list("pk", "last_error")[:ERROR_SEARCH_WINDOW].iterator(chunk_size=2000):
            # Found in the error as the page shows it (scrubbed only when the raw text matches,
            # which is rare): else a term that matched inside a secret would tell its characters.
            if words in (error or "").casefold() and words in safe.text(error).casefold():
                ids.add(pk)
                found += 1
                if found == ERROR_SEARCH_LIMIT:
                    break
        return queryset.filter(pk__in=ids), False

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        job = self.get_object(request, unquote(object_id))
        story = {"story": read_story(job, Safe.current())} if job is not None else {}
        return super().change_view(request, object_id, form_url, {**story, **(extra_context or {})})

    # -- columns ---------------------------------------------------------------------------------

    state = badge_column("status")
    target = target_column()

    @admin.display(description="job")
    def short(self, job: Job) -> SafeString:
        return format_html('<span class="ductile-id" title="{}">{}</span>', job.id, short_id(job.id))

    @admin.display(description="pipeline:step")
    def step(self, job: Job) -> str:
        return getattr(job, "console_where", "") or "-"

    @admin.display(description="attempt")
    def attempts(self, job: Job) -> str:
        return f"{job.attempt}/{job.max_attempts}"

    @admin.display(description="duration")
    def took(self, job: Job) -> str:
        return duration(job.started_at, job.completed_at)

    @admin.display(description="error")
    def error(self, job: Job) -> SafeString | str:
        if not job.last_error:
            return ""
        text = safe_text(job.last_error)
        return format_html('<span class="ductile-error" title="{}">{}</span>', text[:500], text[:80])


@admin.register(JobTransition)
class JobTransitionAdmin(JobIdSearch):
    list_display = ("created_at", "job", "from_status", "arrow", "to", "why", "worker", "attempt")
    ordering = ("-id",)
    sortable_by = ()
    fields = ("job", "from_status", "to", "why", "worker", "attempt", "created_at")
    readonly_fields = fields
    job = job_column()
    to = badge_column("to_status", "to status")

    @admin.display(description="reason")
    def why(self, row: JobTransition) -> SafeString:
        return linkify(safe_text(row.reason))

    @admin.display(description="")
    def arrow(self, row: JobTransition) -> str:
        return "→"


@admin.register(JobLog)
class JobLogAdmin(JobIdSearch):
    """Every finished attempt; a row's page shows the response and stderr."""

    list_display = ("completed_at", "job", "target", "state", "attempt", "submitted_by", "error")
    ordering = ("-completed_at",)
    sortable_by = ()
    fields = ("job", "target", "state", "attempt", "submitted_by", "created_at", "completed_at", "error", "response")
    readonly_fields = fields
    job = job_column()
    target = target_column()
    state = badge_column("status")
    error = text_column("last_error", "error")

    @admin.display(description="response")
    def response(self, row: JobLog) -> SafeString:
        return format_html(
            '{}<p><a href="{}#attempts">All attempts on the job\'s page</a> (stderr, timings).</p>',
            json_tree(Safe.current().json(parse_response(row.result))),
            job_url(row.job_id),
        )


@admin.register(JobAttempt)
class JobAttemptAdmin(JobIdSearch):
    """Every attempt of every job and how it ended (`job_attempts`, a fact table: read-only)."""

    list_display = ("completed_at", "job", "attempt", "state", "worker", "error_text")
    ordering = ("-id",)
    sortable_by = ()
    fields = ("job", "attempt", "state", "worker", "started_at", "completed_at", "error_text")
    readonly_fields = fields
    job = job_column()
    state = badge_column("status")
    error_text = text_column("error", "error")


def ns_column(field: str, description: str) -> Any:
    @admin.display(description=description)
    def column(self: Any, row: JobStopwatch) -> str:
        return nanoseconds(getattr(row, field))

    return column


@admin.register(JobStopwatch)
class JobStopwatchAdmin(JobIdSearch):
    list_display = ("created_at", "job", "plugin", "command", "attempt", "spawn", "before", "after", "state")
    ordering = ("-id",)
    sortable_by = ()
    fields = ("job", "plugin", "command", "step_name", "attempt", "spawn", "before", "after", "state", "subs")
    readonly_fields = fields
    job = job_column()
    state = badge_column("status")
    subs = json_column("subs_json", "sub-timings")
    spawn = ns_column("dur_ns", "plugin run")
    before = ns_column("runtime_pre_ns", "gateway before")
    after = ns_column("runtime_post_ns", "gateway after")
