"""`job inspect`'s text tree after a step is replayed: each job drawn right under its own parent
(issue 36, item 2: the tree was printed level by level, so every replay's children came after
the last replay, indented as if they were its own; `--json` and the console were right)."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command

from gateway.intake.events import publish_event
from gateway.operations import CLI, replay
from ledger.models import Job
from ledger.submitters import Submitter
from tests.support.jobs import jobs_by_step, run_until_idle
from tests.support.runtime import load_runtime

# Real commits: the jobs run on the worker daemon's thread (run_until_idle), on a connection of its own.
pytestmark = [pytest.mark.django_db(transaction=True)]

CHAIN = {
    "name": "chain",
    "on": "chain.start",
    "steps": [
        {"id": "first", "uses": "probe"},
        {"id": "second", "uses": "echo", "with": {"message": "hi"}},
        {"id": "third", "uses": "probe"},
    ],
}


def drawn_parents(text: str) -> dict[str, str | None]:
    """Each job id in the text tree with the job the drawing puts it under: the nearest line above
    it indented less (None for the root)."""
    lines = text.split("tree:\n", 1)[1].splitlines()
    above: list[tuple[int, str]] = []  # (indent, job id) of the open ancestors
    parents: dict[str, str | None] = {}
    for line in lines:
        if line.lstrip().startswith(("error:", "baggage ", "on ", "merged:")):
            continue  # a hop's detail line, not a hop
        indent = len(line) - len(line.lstrip())
        found = re.search(r"\b[0-9a-f]{8}-[0-9a-f-]{27}\b", line)
        assert found, line
        job_id = found.group()
        while above and above[-1][0] >= indent:
            above.pop()
        parents[job_id] = above[-1][1] if above else None
        above.append((indent, job_id))
    return parents


def test_each_replays_children_are_drawn_under_that_replay(config_dir):
    config_dir.extra["pipelines"] = [CHAIN]
    holder = load_runtime(config_dir)
    publish_event(holder.get(), "chain.start", {}, submitter=Submitter.CLI)
    run_until_idle(holder)
    steps = jobs_by_step("chain")
    # The middle step replayed twice: each replay runs `third` again, under itself.
    for _ in range(2):
        replay(holder.get(), steps["second"], by=CLI)
    run_until_idle(holder)
    jobs = {j.id: j for j in Job.objects.all()}
    assert len(jobs) == 7

    out = io.StringIO()
    call_command("job", "inspect", steps["first"].id, stdout=out)
    text = out.getvalue()

    root = steps["first"].id
    assert drawn_parents(text) == {j.id: (j.parent_job_id if j.id != root else None) for j in jobs.values()}, text
