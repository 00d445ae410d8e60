"""Running real plugin processes through the executor: the request envelope, the response
rules, the misbehaving-plugin matrix, facts and routing (spec 000 §5, §6, §7)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ledger.models import Job, JobStopwatch, PluginFact, PluginState
from ledger.states import JobStatus
from tests.support.jobs import last_log, last_response, last_result, run_job
from tests.support.waiting import wait_for

# Real commits: the jobs run on the worker daemon's thread (run_until_idle), on a connection of its own.
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


# -- the request envelope ------------------------------------------------------------------


def test_request_envelope_is_protocol_v2_with_objects_never_null(runtime):
    job = run_job(runtime, "probe", payload={"x": 1})
    request = last_response(job)["result"]["request"]
    assert request["protocol"] == 2 and request["job_id"] == job.id and request["command"] == "poll"
    assert request["config"] == {} and request["state"] == {} and isinstance(request["context"], dict)
    assert request["event"]["payload"] == {"x": 1}
    assert {"type", "source", "timestamp", "event_id"} <= set(request["event"])
    assert request["instance"] == "probe" and request["context"]["ductile_plugin"] == "probe"
    assert request["deadline_at"].endswith("Z")


def test_job_without_payload_still_gets_an_event_with_an_object_payload(runtime):
    job = run_job(runtime, "probe")
    request = last_response(job)["result"]["request"]
    assert request["event"]["payload"] == {}


def test_plugin_environment_is_clean_plus_passthrough(config_dir, monkeypatch):
    from gateway.runtime import RUNTIME

    monkeypatch.setenv("DUCTILE_SECRET_TOKEN", "s3cret")
    monkeypatch.setenv("MY_PASSTHROUGH", "visible")
    config_dir.service["plugin_env_passthrough"] = ["MY_PASSTHROUGH"]
    config_dir.write()
    RUNTIME.load(config_dir.path, os.environ)
    try:
        env = last_response(run_job(RUNTIME, "probe"))["result"]["env"]
    finally:
        RUNTIME._current = None
    assert "DUCTILE_SECRET_TOKEN" not in env and env["MY_PASSTHROUGH"] == "visible"
    assert "PATH" in env
    assert not any(k.startswith("DJANGO") or k == "DATABASE_URL" for k in env)


# -- responses -------------------------------------------------------------------------------


def test_ok_response_succeeds_and_is_logged_verbatim(runtime):
    job = run_job(runtime, "echo", payload={"message": "hey"})
    assert job.status == JobStatus.SUCCEEDED
    response = last_response(job)
    assert response["result"] == "Echoed: hey"


def test_pretty_printed_utf8_response_with_unknown_keys_is_accepted(runtime):
    job = run_job(runtime, "stress", payload={"mode": "pretty"})
    assert job.status == JobStatus.SUCCEEDED
    assert last_response(job)["result"] == "pretty \u00e9"


@pytest.mark.parametrize(
    ("mode", "needle"),
    [
        ("non_json", "not one JSON document"),
        ("empty", "wrote nothing to stdout"),
        ("ok_no_result", "needs a `result`"),
    ],
)
def test_protocol_errors_fail_the_attempt_keep_stdout_and_are_retried(runtime, mode, needle):
    job = run_job(runtime, "stress", payload={"mode": mode}, max_attempts=2)
    assert last_log(job).status == JobStatus.FAILED
    assert job.status == JobStatus.QUEUED and job.attempt == 2  # spec §5.7: all other failures retry
    assert "protocol error" in (job.last_error or "") and needle in (job.last_error or "")
    if mode == "non_json":
        assert last_result(job).startswith("this is not json")


def test_crash_fails_with_stderr_kept(runtime):
    job = run_job(runtime, "stress", payload={"mode": "crash"})
    assert last_log(job).status == JobStatus.FAILED and "exit code 3" in (job.last_error or "")
    assert "simulated crash" in (last_log(job).stderr or "")


def test_a_plugin_killed_by_a_signal_is_said_to_be_so(runtime):
    job = run_job(runtime, "stress", payload={"mode": "killed"})
    assert last_log(job).status == JobStatus.FAILED
    assert "(killed by SIGKILL)" in (job.last_error or ""), job.last_error  # was "(exit code -9)"
    assert "about to be killed" in (last_log(job).stderr or "")


def test_exit_78_is_permanent_even_with_a_retryable_error_response(runtime):
    job = run_job(runtime, "stress", payload={"mode": "exit78"}, max_attempts=4)
    assert job.status == JobStatus.FAILED and job.attempt == 1 and job.next_retry_at is None
    assert job.last_error == "bad configuration"


def test_retry_false_fails_at_once(runtime):
    job = run_job(runtime, "stress", payload={"mode": "retry_false"}, max_attempts=4)
    assert job.status == JobStatus.FAILED and job.attempt == 1


def test_retryable_error_is_queued_for_retry(runtime):
    job = run_job(runtime, "stress", payload={"mode": "error"}, max_attempts=3)
    assert job.status == JobStatus.QUEUED and job.attempt == 2 and job.next_retry_at is not None
    assert job.last_error == "simulated failure"


def test_events_in_an_error_response_are_logged_not_routed(config_dir):
    from gateway.runtime import RUNTIME

    config_dir.routes = [{"from": "stress", "event_type": "stress.never_routed", "to": "echo"}]
    config_dir.write()
    RUNTIME.load(config_dir.path, os.environ)
    job = run_job(RUNTIME, "stress", payload={"mode": "error"}, max_attempts=1)
    assert "stress.never_routed" in last_result(job)
    assert not Job.objects.filter(parent_job_id=job.id).exists()


def test_ok_with_nonzero_exit_still_succeeds(runtime):
    job = run_job(runtime, "stress", payload={"exit_code": 2})
    assert job.status == JobStatus.SUCCEEDED


def test_stdout_over_10_mib_fails_and_keeps_an_excerpt(runtime):
    job = run_job(runtime, "stress", payload={"mode": "big_stdout", "mib": 11})
    assert last_log(job).status == JobStatus.FAILED and "10 MiB" in (job.last_error or "")
    # Issue 12, defect 7: an unusable response is kept as its head and its size, not 10 MiB of it.
    assert last_result(job).startswith("x" * 65536)
    assert last_result(job).endswith(f"stdout was more than {10 * 1024 * 1024} bytes; only the first 65536 are kept]")


def test_stderr_over_64_kib_is_truncated_and_the_job_succeeds(runtime):
    job = run_job(runtime, "stress", payload={"mode": "big_stderr"})
    assert job.status == JobStatus.SUCCEEDED
    stored = last_log(job).stderr or ""
    # Item 5: the cap (§11.4) holds what is stored, the gateway's note included; it overran by the note.
    assert len(stored.encode()) == 64 * 1024
    kept, note = stored.split("\n[ductile] warning: ")
    assert kept == "e" * len(kept)  # the plugin's stderr, cut; then the gateway's note of why
    assert note == "stderr exceeded 64 KiB and was truncated"


def test_hang_times_out_with_sigterm(config_dir):
    from gateway.runtime import RUNTIME

    config_dir.plugins["stress"]["timeout"] = "1s"
    config_dir.write()
    RUNTIME.load(config_dir.path, os.environ)
    job = run_job(RUNTIME, "stress", payload={"mode": "hang"}, max_attempts=1)
    assert job.status == JobStatus.DEAD  # timed_out, attempts exhausted
    assert "timed out after 1s" in (job.last_error or "")
    assert last_log(job).status == JobStatus.TIMED_OUT


def test_term_trapping_grandchild_is_killed_with_the_group(config_dir, tmp_path):
    from gateway.runtime import RUNTIME

    config_dir.plugins["stress"]["timeout"] = "1s"
    config_dir.write()
    RUNTIME.load(config_dir.path, os.environ)
    started = time.monotonic()
    job = run_job(
        RUNTIME, "stress", payload={"mode": "term_trap_grandchild", "marker_dir": str(tmp_path)}, max_attempts=1
    )
    elapsed = time.monotonic() - started
    assert last_log(job).status == JobStatus.TIMED_OUT
    assert elapsed > 5.5  # SIGTERM ignored: SIGKILL came only after the 5 s grace
    pid = int((tmp_path / "grandchild.pid").read_text())
    wait_for(lambda: not _alive(pid), timeout=10, what="the TERM-trapping grandchild to be killed with the group")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "zombie" in status.read_text())


# -- facts, state, stopwatch -------------------------------------------------------------------


def test_declared_fact_appends_with_monotonic_seq_and_mirrors_state(runtime):
    run_job(runtime, "py-greet")
    run_job(runtime, "py-greet")
    facts = list(PluginFact.objects.filter(plugin_name="py-greet").order_by("seq"))
    assert [f.fact_type for f in facts] == ["py-greet.snapshot"] * 2
    assert facts[0].seq is not None and facts[1].seq is not None and facts[1].seq > facts[0].seq
    assert PluginState.current("py-greet") == facts[1].fact_json
    assert facts[1].fact_json["last_greeting"] == "Hello, Test!"


def test_state_is_delivered_on_the_next_request(runtime):
    run_job(runtime, "stress", command="state")
    job = run_job(runtime, "stress", command="state")
    assert last_response(job)["result"] == "count=2"
    assert PluginFact.objects.filter(fact_type="stress.state_snapshot").count() == 2


def test_without_a_fact_rule_state_updates_write_through_shallowly(runtime):
    run_job(runtime, "probe", command="remember", payload={"state": {"a": 1, "b": 1}})
    run_job(runtime, "probe", command="remember", payload={"state": {"b": 2}})
    assert PluginState.current("probe") == {"a": 1, "b": 2}
    assert not PluginFact.objects.filter(plugin_name="probe").exists()


def test_state_over_1_mb_fails_the_job(runtime):
    job = run_job(
        runtime, "probe", command="remember", payload={"state": {"blob": "x" * (1024 * 1024 + 10)}}, max_attempts=1
    )
    assert job.status == JobStatus.FAILED and "1 MB" in (job.last_error or "")
    assert PluginState.current("probe") == {}


def test_every_invocation_gets_a_stopwatch_record(runtime):
    job = run_job(runtime, "echo")
    record = JobStopwatch.objects.get(job_id=job.id)
    assert record.status == "ok" and record.dur_ns > 0 and record.plugin == "echo"
    assert record.exit_wall_ns >= record.enter_wall_ns and record.runtime_pre_ns > 0


def test_stopwatch_subs_are_capped_at_32_head_kept_and_junk_dropped(runtime):
    job = run_job(runtime, "stress", payload={"subs": 40})
    subs = JobStopwatch.objects.get(job_id=job.id).subs_json
    assert [s["name"] for s in subs] == [f"stress.s{i}" for i in range(32)]


# -- routing ---------------------------------------------------------------------------------


def test_routes_fan_out_with_traceability(config_dir):
    from gateway.runtime import RUNTIME

    config_dir.routes = [
        {"from": "stress", "event_type": "stress.event", "to": "echo"},
        {"from": "stress", "event_type": "stress.event", "to": "probe"},
        {"from": "stress", "event_type": "other.event", "to": "py-greet"},
    ]
    config_dir.write()
    RUNTIME.load(config_dir.path, os.environ)
    parent = run_job(RUNTIME, "stress", payload={"emit": 2})
    children = list(Job.objects.filter(parent_job_id=parent.id).order_by("plugin"))
    assert [(c.plugin, c.command, c.submitted_by) for c in children] == [
        ("echo", "handle", "route"),
        ("echo", "handle", "route"),
        ("probe", "handle", "route"),
        ("probe", "handle", "route"),
    ]
    event_ids = {c.source_event_id for c in children}
    assert len(event_ids) == 2  # one core-assigned event_id per emitted event, shared by its fan-out
    child = children[0]
    event, payload = child.event, child.payload
    assert event is not None and payload is not None
    assert event["source"] == "stress" and event["type"] == "stress.event"
    assert event["event_id"] == child.source_event_id and event["timestamp"]
    assert payload["ductile_upstream_plugin"] == "stress"


def test_child_inherits_the_event_dedupe_key(config_dir):
    from gateway.runtime import RUNTIME

    config_dir.routes = [{"from": "stress", "event_type": "stress.event", "to": "echo"}]
    config_dir.write()
    RUNTIME.load(config_dir.path, os.environ)
    parent = run_job(RUNTIME, "stress", payload={"emit": 2, "event_dedupe_key": "batch-7"})
    keys = sorted(str(key) for key in Job.objects.filter(parent_job_id=parent.id).values_list("dedupe_key", flat=True))
    assert keys == ["batch-7:0", "batch-7:1"]


def test_no_matching_route_is_not_an_error(runtime):
    parent = run_job(runtime, "stress", payload={"emit": 3})
    assert parent.status == JobStatus.SUCCEEDED
    assert not Job.objects.filter(parent_job_id=parent.id).exists()


@pytest.mark.parametrize(
    ("knobs", "said"),
    [
        ({"event_type": "t" * 201}, "events[0] dropped: its type is longer than 200 characters (201)"),
        ({"event_dedupe_key": "k" * 511}, "events[0] dropped: its dedupe_key is longer than 512 characters (513)"),
    ],
)
def test_an_event_too_wide_for_the_ledger_is_dropped_and_the_job_still_succeeds(config_dir, knobs, said):
    # On PostgreSQL the insert failed the whole completion ("internal error: DataError") and the
    # job was retried; on SQLite the value was stored whole. Now both drop the event and say why.
    from gateway.runtime import RUNTIME

    config_dir.routes = [{"from": "stress", "event_type": knobs.get("event_type", "stress.event"), "to": "echo"}]
    config_dir.write()
    RUNTIME.load(config_dir.path, os.environ)
    job = run_job(RUNTIME, "stress", payload={"emit": 1, **knobs})
    assert job.status == JobStatus.SUCCEEDED and job.attempt == 1
    assert f"[ductile] warning: {said}" in (last_log(job).stderr or "")
    assert not Job.objects.filter(parent_job_id=job.id).exists()
