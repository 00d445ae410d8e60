"""The audit console through Django's test client, on a ledger filled by real plugin processes:
every table listed and linked, the job list's filters and search, one job's whole story, the
operator's actions (and an auditor refused with 403, nothing changed), the config page, and no
secret on any page (the same redaction as `/config/view`, plus the config's secret values)."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.db import connection
from django.http import HttpRequest
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from gateway.console.admin.jobs import JobAdmin
from gateway.daemon.config_snapshots import record_config
from gateway.execution.lifecycle import schedule_inits
from gateway.intake.events import publish_event
from gateway.operations.accounts import save_account
from ledger.models import (
    CircuitBreaker,
    CircuitBreakerTransition,
    EventContext,
    Job,
    JobSpec,
    JobTransition,
    ScheduleEntry,
    WorkerInstance,
)
from ledger.models.breakers import record_scheduled_outcome
from ledger.states import JobStatus
from ledger.submitters import Submitter
from tests.support.console_setup import (
    CONFIG_SECRET,
    EVENT_SECRET,
    PASSWORD,
    PAYLOAD_SECRET,
    audit_config,
    audit_payload,
    console_roles,
)
from tests.support.jobs import jobs_by_step, run_until_idle
from tests.support.runtime import load_runtime

# Real commits: the jobs run on the worker daemon's thread (run_until_idle), on a connection of its own.
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

TABLES = [
    "job",
    "jobtransition",
    "joblog",
    "jobstopwatch",
    "jobattempt",
    "eventcontext",
    "eventrecord",
    "pluginfact",
    "pluginstate",
    "workerinstance",
    "plugininstancerecord",
    "circuitbreaker",
    "circuitbreakertransition",
    "configsnapshot",
    "scheduleentry",
]


@pytest.fixture
def holder(config_dir):
    audit_config(config_dir)
    config_dir.plugins["stress"]["schedules"] = [{"id": "tick", "every": "1h", "payload": {"mode": "ok"}}]
    config_dir.plugins["ghost"] = {"config": {}}  # no such plugin: skipped, with the reason
    return load_runtime(config_dir)


def run_pipeline(holder, **payload):
    """One run of the `audit` pipeline, run until the queue is idle: its jobs by step."""
    before = set(Job.objects.values_list("id", flat=True))
    publish_event(holder.get(), "audit.start", audit_payload(**payload), submitter=Submitter.API)
    run_until_idle(holder)
    return jobs_by_step("audit", exclude=before)


def person(role, name):
    console_roles()
    save_account(name, role, PASSWORD)
    client = Client()
    assert client.login(request=HttpRequest(), username=name, password=PASSWORD)
    return client


@pytest.fixture
def auditor(holder):
    return person("auditor", "ada")


@pytest.fixture
def operator(holder):
    return person("operator", "olga")


def job_url(job_id):
    return reverse("admin:ledger_job_change", args=[job_id])


def act_url(model, pk, action):
    return reverse(f"admin:ledger_{model}_act", args=[pk, action])


def text(response):
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def said(response):
    """The messages a page shows a person, as text (the admin capitalises their first letter)."""
    items = re.findall(r'<li class="(?:success|warning|error|info)">(.*?)</li>', text(response), re.S)
    return [re.sub(r"<[^>]+>", "", item).strip() for item in items]


def enqueue(plugin="stress", **spec):
    return Job.objects.enqueue(
        JobSpec(plugin, "poll", spec.pop("submitter", Submitter.API), **spec), default_dedupe_ttl=60
    )


# -- what an auditor reads ----------------------------------------------------------------------


def test_every_ledger_table_is_listed_and_its_records_open(holder, auditor):
    schedule_inits(holder.get())  # plugin_instances rows, as the daemon makes them at start
    run_pipeline(holder)
    record_scheduled_outcome("stress", "poll", "j-1", succeeded=False, threshold=1)
    ScheduleEntry.objects.create(plugin="stress", schedule_id="tick", command="poll")
    record_config(holder.get(), "start")  # as `system start` records its config
    for model in TABLES:
        page = text(auditor.get(reverse(f"admin:ledger_{model}_changelist")))
        link = re.search(rf'href="(/admin/ledger/{model}/[^"/]+/change/[^"]*)"', page)
        if model != "workerinstance":  # no daemon ran here, so no worker row
            assert link, f"{model}: no record linked from its list"
            assert auditor.get(link.group(1).replace("&amp;", "&")).status_code == 200
        # Nothing is added, edited or deleted by hand.
        assert auditor.get(reverse(f"admin:ledger_{model}_add")).status_code == 403
    assert text(auditor.get(reverse("admin:admin_logentry_changelist")))


def test_the_index_opens_with_figures_that_link_to_their_filtered_lists(holder, auditor):
    run_pipeline(holder)
    queued = enqueue(payload={"mode": "ok"}).job_id
    dead = enqueue(payload={"mode": "ok"}).job_id
    Job.objects.get(pk=dead).cancel(by="cli")
    record_scheduled_outcome("stress", "poll", dead, succeeded=False, threshold=1)
    page = text(auditor.get(reverse("admin:index")))
    figures = dict(re.findall(r'href="([^"]+)">\s*<span class="ductile-figure-value">([^<]+)</span>', page))
    assert figures["/admin/ledger/job/?status=queued"] == "1"
    assert figures["/admin/ledger/job/?status=problem&amp;created=24h"] == "1"
    assert figures["/admin/ledger/circuitbreaker/?state=tripped"] == "1"
    assert figures["/admin/ledger/workerinstance/?live=yes"] == "0"
    assert queued in text(auditor.get("/admin/ledger/job/?status=queued"))
    problems = text(auditor.get("/admin/ledger/job/?status=problem&created=24h"))
    assert dead[:8] in problems and queued[:8] not in problems
    assert "stress.poll" in text(auditor.get("/admin/ledger/circuitbreaker/?state=tripped"))


def test_the_index_names_its_tables_in_plain_words_and_says_what_the_housekeeping_queue_is(holder, auditor):
    """Issue 36: "Job stopwatchs", and django-q2's tables listed as "Django Q" with nothing to say
    they hold the gateway's own upkeep, not the jobs an auditor came for."""
    page = text(auditor.get(reverse("admin:index")))
    assert ">Job stopwatches</a>" in page and "stopwatchs" not in page.lower()
    section = re.search(r'<div class="app-django_q module.*?</caption>', page, re.S)
    assert section, page
    caption = html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", section.group())).strip())
    assert caption == (
        "Housekeeping queue The gateway's own upkeep, not your jobs: the hourly retention prune and "
        "scheduled backups (service.backup), run on demand by system start's housekeeping cluster "
        "(django-q2). Plugin and pipeline jobs are under Execution ledger, Jobs."
    )


def test_the_workers_list_opens_on_the_live_daemons(holder, auditor):
    """Issue 36: the list showed every row ever registered, stopped ones (each CLI call's) too."""
    live = WorkerInstance.objects.register("vm:101:workers", hostname="vm", pid=101, threads=2, plugins="")
    gone = WorkerInstance.objects.register("vm:102:workers", hostname="vm", pid=102, threads=2, plugins="")
    gone.stop(timezone.now())
    url = reverse("admin:ledger_workerinstance_changelist")
    page = text(auditor.get(url))
    assert live.id in page and gone.id not in page
    assert "?live=all" in page and "?live=no" in page  # the others, one click away
    everything = text(auditor.get(url + "?live=all"))
    assert live.id in everything and gone.id in everything
    stopped = text(auditor.get(url + "?live=no"))
    assert gone.id in stopped and live.id not in stopped


def cells(row: str) -> list[str]:
    return [
        html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, re.S)
    ]


def test_the_workers_list_shows_each_nodes_group_version_and_slots(holder, auditor):
    """Issue 38: nodes as first-class; the console lists what `system status` does."""
    WorkerInstance.objects.register(
        "vm:101:media", hostname="vm", pid=101, threads=3, plugins="stress", version="9.9.9", group="media"
    )
    WorkerInstance.objects.register("vm:102:all", hostname="vm", pid=102, threads=2, plugins="")
    # A `system start --role api` node: its own row, with its roles (gateway.daemon.presence).
    WorkerInstance.objects.register("vm:103:api", hostname="vm", pid=103, threads=0, plugins="", roles="api")
    url = reverse("admin:ledger_workerinstance_changelist")
    page = text(auditor.get(url))
    thead = re.search(r"<thead>.*?</thead>", page, re.S)
    assert thead, page
    head = cells(thead.group())
    assert head[:9] == ["Id", "Live?", "Hostname", "Pid", "Roles", "Group", "Version", "Slots", "Plugins"], head
    row = re.search(r"<tr>(?:(?!</tr>).)*vm:101:media.*?</tr>", page, re.S)
    assert row, page
    assert cells(row.group())[:8] == ["vm:101:media", "live", "vm", "101", "workers", "media", "9.9.9", "3"]
    by_group = text(auditor.get(url + "?worker_group=media"))
    assert "vm:101:media" in by_group and "vm:102:all" not in by_group
    by_role = text(auditor.get(url + "?roles=api"))
    assert "vm:103:api" in by_role and "vm:101:media" not in by_role


def figure(page: str, label: str) -> tuple[str, str]:
    """The index's figure labelled `label`: its link and its value."""
    found = re.search(
        r'href="([^"]+)">\s*<span class="ductile-figure-value">([^<]+)</span>\s*'
        rf'<span class="ductile-figure-label">{re.escape(label)}</span>',
        page,
    )
    assert found, page
    return html.unescape(found.group(1)), found.group(2)


def test_the_index_counts_the_plugins_no_live_node_runs(holder, auditor):
    WorkerInstance.objects.register("vm:101:media", hostname="vm", pid=101, threads=3, plugins="echo", group="media")
    enqueue(payload={"mode": "ok"})  # stress: outside the only live node's group
    page = text(auditor.get(reverse("admin:index")))
    assert figure(page, "plugins no live node runs") == ("/admin/ledger/job/?status=queued&plugin=stress", "1")
    assert 'ductile-alarm" href="/admin/ledger/job/?status=queued&amp;plugin=stress"' in page
    WorkerInstance.objects.register("vm:102:all", hostname="vm", pid=102, threads=2, plugins="")
    page = text(auditor.get(reverse("admin:index")))
    assert figure(page, "plugins no live node runs")[1] == "0"  # served by the node that runs everything


def test_the_job_list_filters_and_searches(holder, auditor):
    steps = run_pipeline(holder)
    failed = run_pipeline(holder, fail=True)["shout"]
    assert failed.status == JobStatus.DEAD
    keyed = enqueue(payload={"mode": "ok"}, dedupe_key="nightly-2026-11-24", submitter=Submitter.CLI).job_id
    old = enqueue(payload={"mode": "ok"}).job_id
    Job.objects.filter(pk=old).update(created_at=timezone.now() - timedelta(days=3))

    def listed(query):
        return set(
            re.findall(r'class="ductile-id" title="([0-9a-f-]{36})"', text(auditor.get(f"/admin/ledger/job/{query}")))
        )

    everything = listed("")
    assert {steps["greet"].id, steps["shout"].id, keyed, failed.id, old} <= everything
    assert listed("?plugin=noisy") == {steps["shout"].id, failed.id}
    assert listed("?pipeline=audit") == set(
        Job.objects.filter(plugin__in=["probe", "noisy"]).values_list("id", flat=True)
    )
    assert listed("?submitted_by=cli") == {keyed}
    assert listed("?status=queued") == {keyed, old}
    assert old not in listed("?created=24h") and keyed in listed("?created=24h")
    assert listed(f"?q={keyed[:6]}") == {keyed}
    assert listed(f"?q={keyed}") == {keyed}
    assert listed("?q=nightly-2026-11-24") == {keyed}
    assert listed("?q=failed+on+purpose") == {failed.id}
    # The list's own columns: status badge, target, pipeline step, attempts, submitter.
    page = text(auditor.get("/admin/ledger/job/?plugin=noisy"))
    assert 'ductile-badge ductile-ok">succeeded' in page and "noisy.handle" in page and "audit:shout" in page


def test_the_list_pages_without_counting(holder, auditor, monkeypatch):
    ids = [enqueue(payload={"mode": "ok"}).job_id for _ in range(7)]
    monkeypatch.setattr(JobAdmin, "list_per_page", 5)
    with CaptureQueriesContext(connection) as queries:
        first = text(auditor.get("/admin/ledger/job/"))
    read = [q["sql"] for q in queries.captured_queries if "job_queue" in q["sql"]]
    assert any("LIMIT 6" in sql for sql in read)  # the page's 5 rows and one more
    assert not [sql for sql in read if "COUNT(" in sql.upper()]
    assert "jobs 1\u20135, more on the next page" in first and 'href="?p=2"' in first
    second = text(auditor.get("/admin/ledger/job/?p=2"))
    assert "jobs 6\u20137 of 7" in second and ids[0][:8] in second  # the oldest two, newest first
    for job_id in ids[:2]:
        Job.objects.get(pk=job_id).cancel(by="cli")
    assert "2 jobs" in text(auditor.get("/admin/ledger/job/?status=dead"))


def test_a_pipeline_jobs_page_tells_its_whole_story(holder, auditor):
    steps = run_pipeline(holder)
    greet, shout = steps["greet"], steps["shout"]
    page = text(auditor.get(job_url(shout.id)))
    # Summary, and the tree from its root with this job marked.
    assert "noisy.handle" in page and "audit:shout" in page and "submitted_by" not in page
    tree = page[page.index('id="tree"') : page.index('id="transitions"')]
    assert tree.index(greet.id) < tree.index(shout.id) and "this job" in tree
    # Transitions with reasons and worker, attempts with timings, stderr.
    transitions = page[page.index('id="transitions"') : page.index('id="attempts"')]
    worker = JobTransition.objects.get(job_id=shout.id, to_status=JobStatus.RUNNING).worker
    assert worker and f"claimed by {worker}" in transitions and "plugin returned ok" in transitions
    attempts = page[page.index('id="attempts"') : page.index('id="request"')]
    assert "plugin ran" in attempts and "noisy: starting with config" in attempts
    # Baggage, with the hop that claimed each key (greet claimed origin.*).
    baggage = page[page.index('id="baggage"') : page.index('id="events"')]
    assert "origin.user" in baggage and "audit:greet" in baggage and greet.id in baggage
    # The event it emitted and the fact it wrote.
    assert "noisy.said" in page[page.index('id="events"') :]
    assert "noisy.snapshot" in page[page.index('id="facts"') :]
    # The parent's page links its child.
    assert shout.id in text(auditor.get(job_url(greet.id)))


def test_no_secret_appears_on_any_page(holder, auditor):
    schedule_inits(holder.get())
    steps = run_pipeline(holder)
    failed = run_pipeline(holder, fail=True)["shout"]
    pages = [
        job_url(steps["greet"].id),  # probe echoes its request: config and baggage
        job_url(steps["shout"].id),  # noisy prints config and payload to stderr
        job_url(failed.id),  # its error names the key
        "/admin/ledger/job/",
        "/admin/ledger/job/?q=failed+on+purpose",
        reverse("admin:config"),
    ]
    for model in TABLES:
        listing = text(auditor.get(reverse(f"admin:ledger_{model}_changelist")))
        pages.append(reverse(f"admin:ledger_{model}_changelist"))
        pages += sorted(set(re.findall(rf'href="(/admin/ledger/{model}/[^"/]+/change/)', listing)))
    for url in pages:
        page = text(auditor.get(url))
        for secret in (CONFIG_SECRET, PAYLOAD_SECRET, EVENT_SECRET):
            assert secret not in page, f"{secret} shown on {url}"
    assert "[REDACTED]" in text(auditor.get(job_url(steps["shout"].id)))


# -- what an operator does, and an auditor may not -----------------------------------------------


def ledger_state():
    """Everything an action could change."""
    return (
        list(Job.objects.order_by("id").values_list("id", "status", "attempt")),
        JobTransition.objects.count(),
        list(CircuitBreaker.objects.values_list("state", "failure_count")),
        list(ScheduleEntry.objects.values_list("status", "reason")),
        LogEntry.objects.count(),
    )


@pytest.fixture
def targets(holder):
    """One record each action applies to."""
    finished = run_pipeline(holder)["greet"]
    queued = enqueue(payload={"mode": "ok"}).job_id
    dead = enqueue(payload={"mode": "ok"}).job_id
    Job.objects.get(pk=dead).cancel(by="cli")
    record_scheduled_outcome("stress", "poll", dead, succeeded=False, threshold=1)
    breaker = CircuitBreaker.objects.get()
    entry = ScheduleEntry.objects.create(plugin="stress", schedule_id="tick", command="poll")
    return {
        "job": {"replay": finished.id, "cancel": queued, "retry": dead},
        "circuitbreaker": {"reset": breaker.pk},
        "scheduleentry": {"pause": entry.pk},
    }


def test_an_auditor_is_refused_every_action_with_403_and_nothing_changes(targets, auditor):
    before = ledger_state()
    for model, actions in targets.items():
        for action, pk in actions.items():
            url = act_url(model, pk, action)
            for response in (auditor.get(url), auditor.post(url, {"confirm": "yes"})):
                assert response.status_code == 403
                assert "not allowed for your account: nothing was changed" in response.content.decode()
            listing = reverse(f"admin:ledger_{model}_changelist")
            posted = auditor.post(listing, {"action": action, "_selected_action": [pk], "confirm": "yes"})
            assert posted.status_code == 403
            # The auditor's pages offer no action at all.
            assert f"/act/{action}/" not in text(auditor.get(reverse(f"admin:ledger_{model}_change", args=[pk])))
    assert ledger_state() == before


def test_an_operator_replays_cancels_and_retries_from_the_record_page_after_confirming(targets, operator):
    jobs = targets["job"]
    before = ledger_state()
    for action, job_id in jobs.items():
        confirm = text(operator.get(act_url("job", job_id, action)))
        assert "are you sure?" in confirm and "recorded with your name (olga)" in confirm
    assert ledger_state() == before  # asking changes nothing
    response = operator.post(act_url("job", jobs["replay"], "replay"), {"confirm": "yes"}, follow=True)
    replayed = Job.objects.exclude(pk__in=list(jobs.values())).get(submitted_by="admin:olga")
    assert said(response) == [f"Probe.handle {jobs['replay']} (succeeded): replayed as job {replayed.id}."]
    first = JobTransition.objects.filter(job_id=replayed.id).first()
    assert first is not None and first.reason == f"enqueued by admin:olga: replay of {jobs['replay']}"
    operator.post(act_url("job", jobs["cancel"], "cancel"), {"confirm": "yes"})
    cancelled = Job.objects.get(pk=jobs["cancel"])
    assert (cancelled.status, cancelled.last_error) == (JobStatus.DEAD, "cancelled by admin:olga")
    operator.post(act_url("job", jobs["retry"], "retry"), {"confirm": "yes"})
    retried = Job.objects.get(pk=jobs["retry"])
    assert (retried.status, retried.attempt) == (JobStatus.QUEUED, 2)
    last = JobTransition.objects.filter(job_id=retried.id).last()
    assert last is not None and last.reason == "retried by admin:olga: attempt 2/4"
    # The console's own trail: who did what to which record.
    trail = list(LogEntry.objects.order_by("id").values_list("user__username", "object_id", "change_message"))
    assert [(u, o) for u, o, _ in trail] == [
        ("olga", jobs["replay"]),
        ("olga", jobs["cancel"]),
        ("olga", jobs["retry"]),
    ]
    assert "by admin:olga" in trail[0][2]


def test_an_operator_uses_list_actions_with_a_confirmation_page(targets, operator, holder):
    jobs = targets["job"]
    listing = reverse("admin:ledger_job_changelist")
    chosen = [jobs["cancel"], jobs["replay"]]  # one queued (cancellable), one not
    page = text(operator.post(listing, {"action": "cancel", "_selected_action": chosen, "index": "0"}))
    assert "are you sure?" in page and "skipped: only a queued job can be cancelled" in page
    assert Job.objects.get(pk=jobs["cancel"]).status == JobStatus.QUEUED
    done = operator.post(listing, {"action": "cancel", "_selected_action": chosen, "confirm": "yes"}, follow=True)
    assert said(done) == [
        f"Stress.poll {jobs['cancel']} (queued): cancelled (dead, never run).",
        f"Probe.handle {jobs['replay']} (succeeded): not done, only a queued job can be cancelled.",
    ]
    assert Job.objects.get(pk=jobs["cancel"]).status == JobStatus.DEAD
    assert Job.objects.get(pk=jobs["replay"]).status == JobStatus.SUCCEEDED


def test_an_operator_resets_a_breaker_and_pauses_and_resumes_a_schedule(targets, operator):
    breaker = targets["circuitbreaker"]["reset"]
    entry = targets["scheduleentry"]["pause"]
    operator.post(act_url("circuitbreaker", breaker, "reset"), {"confirm": "yes"})
    assert CircuitBreaker.objects.get(pk=breaker).state == "closed"
    reset = CircuitBreakerTransition.objects.filter(reason="manual_reset").get()
    assert reset.actor == "admin:olga"
    page = text(operator.get(reverse("admin:ledger_circuitbreaker_change", args=[breaker])))
    assert "manual_reset" in page and "admin:olga" in page
    operator.post(act_url("scheduleentry", entry, "pause"), {"confirm": "yes"})
    paused = ScheduleEntry.objects.get(pk=entry)
    assert paused.status == "paused_manual" and paused.reason is not None
    assert paused.reason.startswith("paused by admin:olga at ")
    page = text(operator.get(reverse("admin:ledger_scheduleentry_change", args=[entry])))
    assert "/act/resume/" in page and "/act/pause/" not in page
    before = timezone.now()
    operator.post(act_url("scheduleentry", entry, "resume"), {"confirm": "yes"})
    resumed = ScheduleEntry.objects.get(pk=entry)
    assert resumed.status == "active" and resumed.next_run_at is not None
    # An `every` entry with no success yet runs again at once (its next run counts from a success).
    assert before <= resumed.next_run_at <= timezone.now()
    # A second reset of a closed breaker is refused by the page, not done twice.
    again = text(operator.get(act_url("circuitbreaker", breaker, "reset")))
    assert "Nothing to do: it is closed already" in again


# -- the config page -------------------------------------------------------------------------------


def test_the_config_page_shows_plugins_their_health_the_seal_and_the_redacted_config(holder, auditor):
    run_pipeline(holder)
    page = text(auditor.get(reverse("admin:config")))
    plugins = page[page.index('id="plugins"') : page.index('id="seal"')]
    assert "noisy 1.0.0" in plugins and "talks on stderr" in plugins
    assert re.search(r'id="plugin-ghost">.*?skipped.*?no plugin named \S*ghost\S* found', plugins, re.S)
    assert re.search(r'id="plugin-noisy">.*?<code>handle</code>', plugins, re.S)
    seal = page[page.index('id="seal"') :]
    assert "config.yaml" in seal and 'ductile-ok">ok' in seal
    resolved = page[page.index('id="resolved"') :]
    assert "[REDACTED]" in resolved and "greeting" in resolved
    assert CONFIG_SECRET not in page


# -- pages and links --------------------------------------------------------------------------------


def links(page):
    """Every address a page links to, as the browser would ask for it: same-site paths, query
    strings resolved against the page's own path, fragments and javascript: left out."""
    found = set()
    for href in re.findall(r'href="([^"#]*)', page):
        href = href.replace("&amp;", "&")
        if not href or href.startswith(("http:", "https:", "javascript:", "mailto:", "/static/")):
            continue
        found.add(href)
    return found


def follow_every_link(client, url):
    """Each link on `url` followed once (relative ones resolved against it, as a browser does):
    none answers 404 or 500. Returns what was followed."""
    from urllib.parse import urljoin

    page = text(client.get(url))
    followed = {}
    for href in sorted(links(page)):
        target = urljoin(url, href)
        if target.startswith("/admin/logout/"):
            continue
        followed[target] = client.get(target).status_code
    broken = {target: code for target, code in followed.items() if code in (404, 500)}
    assert not broken, f"broken links on {url}: {broken}"
    return followed


def test_every_link_on_the_event_context_list_leads_somewhere(holder, auditor):
    run_pipeline(holder)
    listing = reverse("admin:ledger_eventcontext_changelist")
    followed = follow_every_link(auditor, listing)
    # The parent hop's link: the context of the pipeline's first step, opened from the list.
    parents = [t for t in followed if re.fullmatch(r"/admin/ledger/eventcontext/[^/]+/change/", t)]
    assert len(parents) >= 2, followed  # each hop's own link and the shout hop's parent
    shout = EventContext.objects.get(step_id="shout")
    assert reverse("admin:ledger_eventcontext_change", args=[shout.parent_id]) in followed
    assert all(followed[p] == 200 for p in parents)


@pytest.mark.parametrize("model", ["job", "jobtransition", "eventrecord", "circuitbreaker", "scheduleentry"])
def test_every_link_on_a_sample_of_list_pages_leads_somewhere(holder, auditor, model):
    run_pipeline(holder)
    record_scheduled_outcome("stress", "poll", "j-1", succeeded=False, threshold=1)
    ScheduleEntry.objects.create(plugin="stress", schedule_id="tick", command="poll")
    follow_every_link(auditor, reverse(f"admin:ledger_{model}_changelist"))


def every_list_url(user):
    """The list page of every table the console shows this person."""
    from django.contrib import admin

    return [
        reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        for model in admin.site._registry
        if user.has_perm(f"{model._meta.app_label}.view_{model._meta.model_name}")
    ]


@pytest.mark.parametrize("page", ["99999999999999999999", "9223372036854775807", "0", "-1", "x"])
def test_a_page_number_out_of_range_is_the_lists_first_page_never_a_500(holder, operator, page):
    """Past SQLite's (and PostgreSQL's) integer range, negative, zero or not a number: the admin's
    answer to a page it cannot show, a redirect to the list, never a server error."""
    enqueue(payload={"mode": "ok"})
    lists = every_list_url(User.objects.get(username="olga"))
    # The ledger's tables, the console's own trail and its three login tables at least.
    assert len(lists) >= len(TABLES) + 4 and "/admin/axes/accessfailurelog/" in lists
    for url in lists:
        response = operator.get(url, {"p": page})
        assert response.status_code in (200, 302), (url, page, response.status_code)
        if response.status_code == 302:
            assert response["Location"].startswith(url), response["Location"]
            assert operator.get(response["Location"]).status_code == 200
