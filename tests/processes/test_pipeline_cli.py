"""The pipeline affordances an agent drives from the CLI, against a real `runworkers` and real plugin
processes: synchronous runs (execution_mode, timeout, the terminal result), the tree waiter's
wake-ups, `pipeline dry-run`, `job inspect` showing the whole tree, `job replay`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.checkout import REPO
from tests.support.processes import cli_env, ductile, ductile_json, ledger, start_workers

pytestmark = pytest.mark.postgres

GATE = {"path": "payload.n", "op": "gte", "value": 3}
PIPELINES = [
    {
        "name": "chain",
        "on": "chain.start",
        "execution_mode": "synchronous",
        "timeout": "60s",
        "steps": [
            {"id": "first", "uses": "probe", "baggage": {"origin.user": "payload.user"}},
            {"id": "second", "uses": "echo", "with": {"message": "hello {context.origin.user}"}},
            {"id": "third", "uses": "probe", "if": GATE, "baggage": {"echo.said": "payload.result"}},
        ],
    },
    {
        "name": "fan",
        "on": "fan.start",
        "execution_mode": "synchronous",
        "steps": [{"split": [{"uses": "probe"}, {"uses": "echo"}]}],
    },
    {
        "name": "slow",
        "on": "slow.start",
        "execution_mode": "synchronous",
        "timeout": "1s",
        "steps": [{"id": "nap", "uses": "stress", "with": {"mode": "ok", "sleep": 5}}],
    },
]


@pytest.fixture
def cfg(process_db):
    process_db.extra["pipelines"] = PIPELINES
    process_db.write()
    return process_db


@pytest.fixture
def workers(cfg):
    daemon = start_workers(cfg, "--threads", "2")
    yield daemon
    daemon.terminate()
    daemon.wait(timeout=30)


def claims(baggage):
    """Baggage without the core's `ductile.*` control fields."""
    return {k: v for k, v in baggage.items() if k != "ductile"}


def run_chain(cfg, n, *extra):
    return ductile_json(cfg, "pipeline", "run", "chain", "--payload", json.dumps({"user": "ada", "n": n}), *extra)


def test_a_synchronous_pipeline_waits_and_answers_with_the_terminal_steps_result(cfg, workers):
    code, answer = run_chain(cfg, 7)
    assert code == 0, answer
    assert answer["status"] == "succeeded" and answer["complete"] is True
    assert [(h["plugin"], h["status"]) for h in answer["tree"]] == [
        ("probe", "succeeded"),
        ("echo", "succeeded"),
        ("core.switch", "succeeded"),
        ("probe", "succeeded"),
    ]
    # The answer is the last step's response: probe echoes the request it got, baggage included.
    request = answer["result"]["result"]["request"]
    assert request["context"]["origin"] == {"user": "ada"}
    assert request["context"]["echo"] == {"said": "Echoed: hello ada"}
    assert answer["job_id"] == answer["tree"][0]["job_id"]
    assert answer["duration_ms"] >= 0


def test_a_bypassed_last_step_never_becomes_the_result(cfg, workers):
    code, answer = run_chain(cfg, 1)
    assert code == 0, answer
    assert [h["plugin"] for h in answer["tree"]] == ["probe", "echo", "core.switch"]
    assert answer["result"]["result"] == "Echoed: hello ada"  # the echo step's, not the switch's


def test_async_flag_returns_at_once_with_the_queued_root(cfg):
    code, answer = run_chain(cfg, 7, "--async")  # no workers: it could never finish
    assert code == 0 and answer["status"] == "queued" and len(answer["job_ids"]) == 1
    assert [j["status"] for j in ledger(cfg)] == ["queued"]


def test_past_its_timeout_a_synchronous_run_reports_the_root_still_running(cfg, workers):
    code, answer = ductile_json(cfg, "pipeline", "run", "slow")
    assert code == 1
    assert answer["timeout_exceeded"] is True and answer["status"] == "running"
    assert answer["message"] == "Pipeline still running after timeout."
    assert answer["tree"][0]["status"] in ("queued", "running")


def test_a_synchronous_pipeline_with_two_entry_dispatches_is_refused_before_anything_runs(cfg):
    proc = ductile(cfg, "pipeline", "run", "fan")
    assert proc.returncode == 2
    assert "starts with 2 entry dispatches" in proc.stderr and "--async" in proc.stderr
    assert ledger(cfg) == []
    code, answer = ductile_json(cfg, "pipeline", "run", "fan", "--async")
    assert code == 0 and len(answer["job_ids"]) == 2


def test_event_publish_wait_prints_every_started_tree(cfg, workers):
    code, answer = ductile_json(cfg, "event", "publish", "chain.start", "--payload", '{"user": "bo", "n": 5}', "--wait")
    assert code == 0 and answer["complete"] is True
    assert [h["plugin"] for h in answer["tree"]] == ["probe", "echo", "core.switch", "probe"]


_WAITER = """
import json, sys, time
from gateway.bootstrap import prepare_process
prepare_process(sys.argv[1])
import django
django.setup()
from gateway.storage.database import ensure_schema
ensure_schema()
from gateway.intake import trees
from gateway.intake.events import pipeline_entries
from gateway.intake import submit_ids
from gateway.runtime import RUNTIME
from ledger.submitters import Submitter
# Only a wake-up can end this wait in time: the periodic re-check is pushed past the timeout.
trees.RECHECK_SECONDS = 600
runtime = RUNTIME.get()
with trees.TreeWaiter() as waiter:
    ids = submit_ids(runtime, pipeline_entries(runtime, "chain", {"user": "cy", "n": 9}, submitter=Submitter.CLI))
    outcome = waiter.wait(ids, 90)
print(json.dumps({"complete": outcome.complete, "jobs": len(outcome.jobs)}))
"""


def test_the_tree_waiter_is_woken_by_other_processes_finishing_jobs(cfg, workers):
    env = cli_env(cfg, **({"DATABASE_URL": cfg.database_url} if cfg.database_url else {}))
    proc = subprocess.run(
        [sys.executable, "-c", _WAITER, str(cfg.path)], capture_output=True, text=True, timeout=180, env=env, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr
    # Each of the four hops finished in the workers' process; without their wake-ups this wait
    # would have slept through its 90 s timeout and come back incomplete.
    assert json.loads(proc.stdout.splitlines()[-1]) == {"complete": True, "jobs": 4}


# -- dry runs ----------------------------------------------------------------------------------


def test_dry_run_shows_steps_remapped_payloads_baggage_and_switch_decisions_and_enqueues_nothing(cfg):
    code, preview = ductile_json(cfg, "pipeline", "dry-run", "chain", "--payload", '{"user": "ada", "n": 1}')
    assert code == 0
    hops = preview["hops"]
    assert [(h["step"], h["plugin"], h["parent"]) for h in hops] == [
        ("first", "probe", None),
        ("second", "echo", 0),
        ("third__switch", "core.switch", 1),
    ]
    assert claims(hops[0]["context"]) == {"origin": {"user": "ada"}}
    assert hops[1]["context"]["ductile"]["step"] == "second" and hops[1]["context"]["ductile"]["route_depth"] == 2
    assert hops[1]["payload"]["message"] == "hello ada"  # with: rendered from baggage
    assert hops[2]["decision"] == "false"  # n comes from the trigger, so the switch is decided
    assert ledger(cfg) == []
    code, preview = ductile_json(cfg, "pipeline", "dry-run", "chain", "--payload", '{"user": "ada", "n": 4}')
    assert [h["step"] for h in preview["hops"]][-2:] == ["third__switch", "third"]
    # The third step's baggage claim reads payload.result, which only the echo plugin's output
    # supplies: the dry run stops there and says why.
    assert "payload.result is missing" in preview["hops"][-1]["refusal"]


def test_a_run_or_publish_whose_payload_lacks_an_entry_claims_source_fails_and_enqueues_nothing(cfg):
    """Spec 000, baggage rules: "Missing source paths fail the job or trigger"."""
    words = "pipeline 'chain' step 'first': baggage origin.user: source payload.user is missing"
    for argv in (("pipeline", "run", "chain", "--async"), ("event", "publish", "chain.start")):
        code, answer = ductile_json(cfg, *argv, "--payload", '{"n": 1}')
        assert code == 2 and words in answer["error"] and answer["error"].endswith("nothing was enqueued"), answer
    assert ledger(cfg) == []


def test_dry_run_text_and_refusals_at_the_entry(cfg):
    proc = ductile(cfg, "pipeline", "dry-run", "chain", "--payload", '{"n": 1}', "-v")
    assert proc.returncode == 0, proc.stderr
    assert "WOULD STOP: step 'first': baggage origin.user: source payload.user is missing" in proc.stdout
    assert "on chain.start" in proc.stdout  # -v names the event that reached each hop
    assert "nothing enqueued" in proc.stdout
    assert ductile(cfg, "pipeline", "dry-run", "nope").returncode == 2


def test_run_and_publish_accept_dry_run(cfg):
    code, preview = ductile_json(cfg, "pipeline", "run", "chain", "--dry-run", "--payload", '{"user": "a", "n": 9}')
    assert code == 0 and preview["hops"][0]["step"] == "first"
    code, preview = ductile_json(cfg, "event", "publish", "fan.start", "--dry-run")
    assert code == 0 and sorted(h["plugin"] for h in preview["hops"]) == ["echo", "probe"]
    assert ledger(cfg) == []


# -- job inspect and replay ----------------------------------------------------------------------


def test_job_inspect_shows_the_whole_tree_with_each_hops_baggage(cfg, workers):
    code, answer = run_chain(cfg, 7)
    assert code == 0, answer
    second = answer["tree"][1]["job_id"]
    code, detail = ductile_json(cfg, "job", "inspect", second)
    assert code == 0
    tree = detail["tree"]
    assert [(h["step"], h["this_job"]) for h in tree] == [
        ("first", False),
        ("second", True),
        ("third__switch", False),
        ("third", False),
    ]
    assert claims(tree[0]["baggage"]) == {"origin": {"user": "ada"}} and tree[0]["baggage_added"] == ["origin"]
    assert claims(tree[3]["baggage"]) == {"origin": {"user": "ada"}, "echo": {"said": "Echoed: hello ada"}}
    # One pipeline instance across its hops; the control fields follow each hop.
    control = [h["baggage"]["ductile"] for h in tree]
    assert len({c["pipeline_instance_id"] for c in control}) == 1
    assert [(c["step"], c["route_depth"]) for c in control] == [
        ("first", 1),
        ("second", 2),
        ("third__switch", 3),
        ("third", 4),
    ]
    assert tree[3]["baggage_added"] == ["echo"]
    assert tree[1]["event_type"] == "ductile.step.succeeded" and tree[1]["route_depth"] == 2
    text = ductile(cfg, "job", "inspect", second, "-v").stdout
    assert "chain:second" in text and "<- this job" in text and "merged: echo" in text


def test_job_replay_runs_the_step_again_from_its_context_and_the_pipeline_continues(cfg, workers):
    code, answer = run_chain(cfg, 7)
    assert code == 0, answer
    original = answer["tree"][1]
    code, replay = ductile_json(cfg, "job", "replay", original["job_id"], "--wait", "--timeout", "60")
    assert code == 0, replay
    assert replay["complete"] is True
    # The replayed step and everything after it ran again, with the original's baggage.
    assert [h["plugin"] for h in replay["tree"]] == ["echo", "core.switch", "probe"]
    again = replay["tree"][0]
    assert again["job_id"] != original["job_id"] and again["parent_job_id"] == answer["tree"][0]["job_id"]
    code, detail = ductile_json(cfg, "job", "inspect", again["job_id"])
    assert detail["context"]["step"] == "second" and claims(detail["context"]["baggage"]) == {"origin": {"user": "ada"}}
    assert detail["transitions"][0]["reason"] == f"enqueued by cli: replay of {original['job_id']}"
    assert replay["result"]["result"]["request"]["context"]["echo"] == {"said": "Echoed: hello ada"}


def test_job_replay_dry_run_and_refusals(cfg):
    code, done = ductile_json(cfg, "plugin", "run", "echo", "--command", "poll")  # runs in-process
    assert code == 0
    code, preview = ductile_json(cfg, "job", "replay", done["job_id"], "--dry-run")
    assert code == 0 and preview["replay_of"] == done["job_id"]
    assert (preview["plugin"], preview["command"]) == ("echo", "poll")
    code, queued = ductile_json(cfg, "pipeline", "run", "chain", "--async", "--payload", '{"user": "a", "n": 1}')
    proc = ductile(cfg, "job", "replay", queued["job_ids"][0])
    assert proc.returncode == 2 and "still queued" in proc.stderr
    assert ductile(cfg, "job", "replay", "no-such-job").returncode == 1
    assert len(ledger(cfg)) == 2  # the echo run and the queued root: no replay was enqueued
