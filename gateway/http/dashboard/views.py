"""The dashboard's pages and their streams. A person logs in with the audit console's session; any
account that may read the ledger (the `auditor` role is enough) sees them. Anyone else is sent to
the console's login page, which says they are not authorised, as the console itself does."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib import admin
from django.contrib.auth.decorators import user_passes_test
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.shortcuts import render
from django.urls import reverse

from gateway.http.dashboard.stream import page_feed
from gateway.http.eventstream import open_stream
from gateway.http.streamseats import Refusal
from gateway.reports import live, runs
from gateway.runtime import RUNTIME
from ledger.states import JobStatus
from pipelines.dsl import Pipeline
from pipelines.visualize import flow_order, mermaid, mermaid_ids, node_label

# A job's page in the audit console; the pages put the id in place of this.
JOB_ID_PLACEHOLDER = "00000000-0000-0000-0000-000000000000"
MAX_CHOSEN = 100  # runs one pipelines page may follow at once (one per pipeline on the page)
# The colours a step can take on the pipelines page, in the order the legend shows them.
STEPS = (
    JobStatus.QUEUED,
    JobStatus.RUNNING,
    JobStatus.SUCCEEDED,
    JobStatus.FAILED,
    JobStatus.TIMED_OUT,
    JobStatus.DEAD,
)


def labelled(statuses: Iterable[str]) -> list[tuple[str, str]]:
    return [(status, status.replace("_", " ")) for status in statuses]


def can_view(user: Any) -> bool:
    return bool(user.is_active and user.is_staff and user.has_perm("ledger.view_job"))


viewer_required = user_passes_test(can_view, login_url="admin:login")


def page_context(request: HttpRequest, title: str, stream: str, **extra: Any) -> dict[str, Any]:
    """The admin's frame (header, user tools, theme) plus what the page's script reads."""
    return {
        **admin.site.each_context(request),
        "title": title,
        "statuses": labelled(JobStatus.values),
        # The admin's app list beside the page would squeeze the figures.
        "is_nav_sidebar_enabled": False,
        "dashboard_config": {
            "stream": stream,
            "jobUrl": reverse("admin:ledger_job_change", args=[JOB_ID_PLACEHOLDER]),
            "jobIdPlaceholder": JOB_ID_PLACEHOLDER,
        },
        **extra,
    }


@viewer_required
def overview(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "dashboard/overview.html",
        page_context(
            request,
            "Live dashboard",
            reverse("dashboard:stream") + "?view=overview",
            window_minutes=live.WINDOW_MINUTES,
        ),
    )


def diagram(index: int, pipeline: Pipeline) -> dict[str, Any]:
    ids = mermaid_ids(pipeline)
    return {
        "name": pipeline.name,
        "trigger": pipeline.trigger,
        "mermaid": mermaid(pipeline),
        # In the order the page lists a run's steps: step id, Mermaid node id, label.
        "nodes": [[step, ids[step], node_label(pipeline, step)] for step in flow_order(pipeline)],
        "script_id": f"nodes-{index}",
    }


@viewer_required
def pipelines(request: HttpRequest) -> HttpResponse:
    found = sorted(RUNTIME.get().pipelines.pipelines.items())
    diagrams = [diagram(index, pipeline) for index, (_, pipeline) in enumerate(found)]
    stream = reverse("dashboard:stream") + "?view=pipelines"
    context = page_context(request, "Pipelines", stream, diagrams=diagrams, step_statuses=labelled(STEPS))
    context["dashboard_config"]["run"] = request.GET.get("run") or None
    return render(request, "dashboard/pipelines.html", context)


def pipelines_parts(chosen: list[str]) -> dict[str, Any]:
    """Every pipeline's latest runs, and the steps of the run each pipeline's diagram colours: the
    one chosen on the page (`chosen`: root job ids), else its latest."""
    names = sorted(RUNTIME.get().pipelines.pipelines)
    latest = runs.RECENT_RUNS.latest()
    steps: dict[str, Any] = {}
    for job_id in chosen:
        if (found := runs.run_steps(job_id)) is not None:
            steps[found["pipeline"]] = found
    for name in names:
        if name not in steps and latest.get(name):
            steps[name] = runs.run_steps(latest[name][0].job_id)
    return {"runs": {name: [run.as_dict() for run in latest.get(name, [])] for name in names}, "steps": steps}


def stream(request: HttpRequest) -> HttpResponseBase:
    """`?view=overview` (the figures and new events) or `?view=pipelines[&run=JOB_ID...]` (every
    pipeline's latest runs, and the steps of the chosen runs, else of each pipeline's latest).
    Refusals are JSON, never a redirect: EventSource gives up on an answer that is not 200
    instead of reconnecting to a login page."""
    if not can_view(request.user):
        return JsonResponse({"error": "log in to the audit console with a role that may read the ledger"}, status=403)
    view = request.GET.get("view", "overview")
    if view == "overview":
        feed = page_feed(lambda: {"snapshot": live.LIVE_FIGURES.get(RUNTIME.get())}, with_events=True)
    elif view == "pipelines":
        chosen = [job_id for job_id in request.GET.getlist("run")[:MAX_CHOSEN] if job_id]
        feed = page_feed(lambda: pipelines_parts(chosen), with_events=False)
    else:
        return JsonResponse({"error": f"unknown view {view!r}: use overview or pipelines"}, status=400)
    opened = open_stream(request.META, feed, f"user {request.user.get_username()}", RUNTIME.get().config)
    if isinstance(opened, Refusal):
        # EventSource retries on its own after its `retry:` delay; the page says the feed is away.
        return JsonResponse({"error": opened.message}, status=opened.status, headers={"Retry-After": "5"})
    return opened
