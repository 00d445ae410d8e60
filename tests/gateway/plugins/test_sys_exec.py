"""The bundled `sys_exec`, run as a real plugin process through the runtime: the original's
environment (DUCTILE_PAYLOAD_<KEY>, DUCTILE_COMMAND, DUCTILE_EVENT_TYPE), the list form of
`command` (an argv, no shell) beside the shell string, the original's config keys and event
payload, and its refusals and timeouts."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from ledger.models import Job, JobStopwatch
from ledger.states import JobStatus
from tests.support.config_dirs import ConfigDir
from tests.support.jobs import last_log, last_response, run_job, run_jobs
from tests.support.processes import ductile_json
from tests.support.runtime import load_runtime

# Real commits: the jobs run on the worker daemon's thread (run_until_idle), on a connection of its own.
pytestmark = pytest.mark.django_db(transaction=True)

# The keys of the original's sys_exec.completed payload (plus timed_out on a timeout).
EVENT_KEYS = {
    "command",
    "exit_code",
    "duration_ms",
    "stdout_truncated",
    "stderr_truncated",
    "working_dir",
    "executed_at",
    "stdout",
    "stderr",
}


def runtime_with(config_dir: ConfigDir, **instances: dict[str, Any]) -> Any:
    """Each keyword an alias of sys_exec with that config."""
    for name, config in instances.items():
        config_dir.plugins[name] = {"uses": "sys_exec", "config": config, "retry": {"max_attempts": 4}}
    return load_runtime(config_dir)


def spans_of(job: Job) -> dict[str, dict[str, Any]]:
    """The job's (single attempt's) stopwatch sub-spans by name."""
    return {s["name"]: s for s in JobStopwatch.objects.get(job_id=job.id).subs_json}


def event_of(job: Job) -> dict[str, Any]:
    [event] = last_response(job)["events"]
    return event


def test_payload_keys_reach_the_command_as_ductile_payload_variables(config_dir):
    holder = runtime_with(
        config_dir, envdump={"command": "env | grep -E '^DUCTILE_(COMMAND|EVENT_TYPE|JOB_ID|PAYLOAD)' | sort"}
    )
    payload = {"video-id": "a b *", "n": 3, "obj": {"x": [1]}, "Video_ID": "dup", "1st": True, "": None, "t": "é"}
    job = run_job(holder, "envdump", "handle", payload=payload)
    assert job.status == JobStatus.SUCCEEDED, job.last_error
    assert event_of(job)["payload"]["stdout"].splitlines() == [
        "DUCTILE_COMMAND=handle",
        "DUCTILE_EVENT_TYPE=cli.trigger",
        f"DUCTILE_JOB_ID={job.id}",
        "DUCTILE_PAYLOAD=" + json.dumps(payload, ensure_ascii=False),
        "DUCTILE_PAYLOAD_N=3",
        'DUCTILE_PAYLOAD_OBJ={"x":[1]}',  # nested values as compact JSON
        "DUCTILE_PAYLOAD_T=é",
        "DUCTILE_PAYLOAD_VALUE=",  # an empty key; null is the empty string
        "DUCTILE_PAYLOAD_VIDEO_ID=a b *",  # upper case, other characters `_`
        "DUCTILE_PAYLOAD_VIDEO_ID_2=dup",  # the second key spelling the same name
        "DUCTILE_PAYLOAD__1ST=True",  # a leading digit gets `_`; booleans as the original spells them
    ]


def test_the_list_form_is_an_argv_with_variables_replaced_and_no_shell(config_dir):
    # `$NAME`, not `${NAME}`: in a config file `${NAME}` is the gateway's environment, read at load.
    argv = ["printf", "%s|", "$DUCTILE_PAYLOAD_TEXT", "$DUCTILE_COMMAND", "$NOT_SET", "a;b", "*"]
    holder = runtime_with(config_dir, argv=dict(command=argv), shell=dict(command='echo "$DUCTILE_PAYLOAD_TEXT" | rev'))
    argv_job, shell_job = run_jobs(
        holder, [(name, "handle", {"text": "two words; $(id)"}) for name in ("argv", "shell")]
    )
    argv_event = event_of(argv_job)["payload"]
    # One argument each: no splitting, no substitution, no globbing, no `;`.
    assert argv_event["stdout"] == "two words; $(id)|handle|$NOT_SET|a;b|*|"
    assert argv_event["command"] == "printf %s| two words; $(id) handle $NOT_SET a;b *"
    # The string form runs under the shell, as before.
    shell_event = event_of(shell_job)["payload"]
    assert shell_event["stdout"] == ")di($ ;sdrow owt\n"
    assert shell_event["command"] == 'echo "two words; $(id)" | rev'  # variables shown as they were set


def test_the_event_carries_the_originals_payload_and_can_be_shaped_by_config(config_dir):
    holder = runtime_with(
        config_dir,
        plain={"command": "echo out; echo err >&2"},
        quiet={"command": "echo out", "include_output_in_event": False, "event_type": "build.done"},
        silent={"command": "echo out", "emit_event": "false"},
        only_failures={"command": "true", "emit_event_on_exit_codes": [1, 2]},
    )
    plain, quiet, silent, only_failures = run_jobs(
        holder, [(name, "poll", None) for name in ("plain", "quiet", "silent", "only_failures")]
    )
    event = event_of(plain)
    assert event["type"] == "sys_exec.completed" and set(event["payload"]) == EVENT_KEYS
    payload = event["payload"]
    assert (payload["exit_code"], payload["stdout"], payload["stderr"]) == (0, "out\n", "err\n")
    assert (payload["stdout_truncated"], payload["stderr_truncated"], payload["working_dir"]) == (False, False, "")
    assert payload["command"] == "echo out; echo err >&2" and payload["duration_ms"] >= 0
    assert payload["executed_at"].endswith("+00:00")
    assert last_response(plain)["result"].startswith("command exited with code 0 in ")
    assert event_of(quiet)["type"] == "build.done" and "stdout" not in event_of(quiet)["payload"]
    assert "events" not in last_response(silent) and "events" not in last_response(only_failures)
    assert {j.status for j in (plain, quiet, silent, only_failures)} == {JobStatus.SUCCEEDED}
    spans = spans_of(plain)  # the original's sub-span names
    assert spans["sys_exec.subprocess_run"]["exit_code"] == 0 and spans["sys_exec.output_capture"]["bytes"] == 8


def test_exit_codes_decide_success_and_retry_as_configured(config_dir):
    holder = runtime_with(
        config_dir,
        fails={"command": "echo boom >&2; exit 3"},
        retried={"command": "exit 75", "retry_on_exit_codes": [75]},
        accepted={"command": "exit 1", "success_exit_codes": [0, 1]},
        tolerated={"command": "exit 4", "fail_on_nonzero": False},
    )
    fails, retried, accepted, tolerated = run_jobs(
        holder, [(name, "poll", None) for name in ("fails", "retried", "accepted", "tolerated")]
    )
    # A failing command fails once and is not retried (the original's default), its event kept.
    assert (fails.status, fails.attempt, fails.last_error) == (
        JobStatus.FAILED,
        1,
        "command failed with exit code 3: boom",
    )
    assert event_of(fails)["payload"]["exit_code"] == 3
    assert (retried.status, retried.attempt) == (JobStatus.QUEUED, 2)  # its retry waits for its backoff
    assert {accepted.status, tolerated.status} == {JobStatus.SUCCEEDED}


def test_output_is_capped_to_its_head_and_the_rest_only_counted(config_dir):
    holder = runtime_with(config_dir, chatty={"command": "printf 'x%.0s' $(seq 1 5000)", "stdout_max_bytes": 64})
    job = run_job(holder, "chatty", "poll")
    payload = event_of(job)["payload"]
    assert (payload["stdout"], payload["stdout_truncated"]) == ("x" * 64, True)
    assert spans_of(job)["sys_exec.output_capture"]["bytes"] == 5000


def test_a_payload_variable_too_big_for_exec_is_left_out_and_the_command_still_runs(config_dir):
    holder = runtime_with(
        config_dir,
        big={"command": 'printf %s "$DUCTILE_PAYLOAD_SMALL-"; test -n "$DUCTILE_PAYLOAD_BIG" || printf absent'},
    )
    job = run_job(holder, "big", "handle", payload={"big": "x" * 200_000, "small": "y"})
    assert event_of(job)["payload"]["stdout"] == "y-absent"
    logs = [entry["message"] for entry in last_response(job)["logs"]]
    assert "DUCTILE_PAYLOAD_BIG left out of the command's environment: its value is over 131072 bytes" in logs
    assert any(m.startswith("DUCTILE_PAYLOAD left out") for m in logs)  # the whole payload too


def test_a_command_past_its_timeout_is_killed_and_reported_before_the_gateway_steps_in(config_dir):
    config_dir.plugins["sleepy"] = {
        "uses": "sys_exec",
        "config": {"command": "echo started; sleep 30"},
        "timeout": "1s",
    }
    config_dir.plugins["quick"] = {"uses": "sys_exec", "config": {"command": "sleep 30", "timeout_seconds": 0.2}}
    config_dir.plugins["detached"] = {"uses": "sys_exec", "config": {"command": "sleep 30 & echo done"}}
    holder = load_runtime(config_dir)
    started = time.monotonic()
    sleepy, quick, detached = run_jobs(holder, [(name, "poll", None) for name in ("sleepy", "quick", "detached")])
    assert time.monotonic() - started < 6
    # Without timeout_seconds the command may run until just before the job's deadline (`timeout:
    # 1s`): the plugin answers with its timeout event rather than being killed by the gateway.
    assert sleepy.status == JobStatus.FAILED and (sleepy.last_error or "").startswith("command timed out after 0.")
    event = event_of(sleepy)["payload"]
    assert (event["exit_code"], event["timed_out"]) == (-1, True)
    assert quick.last_error == "command timed out after 0.200s" and quick.attempt == 1
    assert spans_of(quick)["sys_exec.subprocess_run"]["status"] == "timeout"
    # A background child holding the output open does not hold the job: the command itself exited.
    assert detached.status == JobStatus.SUCCEEDED and event_of(detached)["payload"]["stdout"] == "done\n"


def test_refusals_are_permanent(config_dir, tmp_path):
    holder = runtime_with(
        config_dir,
        nowhere={"command": "true", "working_dir": str(tmp_path / "missing")},
        empty={"command": []},
        missing={"command": ["no-such-binary-anywhere", "x"]},
    )
    jobs = run_jobs(
        holder,
        [("nowhere", "poll", None), ("empty", "poll", None), ("missing", "poll", None), ("missing", "health", None)],
    )
    assert [(j.status, j.attempt) for j in jobs] == [(JobStatus.FAILED, 1)] * 4
    assert [j.last_error for j in jobs] == [
        f"working_dir is not a directory: {tmp_path / 'missing'}",
        "config.command list cannot be empty",
        "command execution failed: [Errno 2] No such file or directory: 'no-such-binary-anywhere'",
        "executable not found in PATH: no-such-binary-anywhere",
    ]
    assert "config.command list cannot be empty" in (last_log(jobs[1]).stderr or "")  # exit 78, said on stderr


def test_health_passes_for_a_command_on_path(config_dir):
    holder = runtime_with(config_dir, listed={"command": ["sh", "-c", "true"]}, shelled={"command": "true"})
    assert {j.status for j in run_jobs(holder, [("listed", "health", None), ("shelled", "health", None)])} == {
        JobStatus.SUCCEEDED
    }


@pytest.mark.process
def test_a_config_using_every_key_of_the_original_passes_the_strict_check(config_dir):
    config_dir.plugins["backup"] = {
        "uses": "sys_exec",
        "config": {
            "command": ["restic", "backup", "$DUCTILE_PAYLOAD_PATH"],
            "working_dir": "/",
            "env": {"RESTIC_REPOSITORY": "/srv/restic"},
            "timeout_seconds": 600,
            "event_type": "backup.finished",
            "emit_event": True,
            "include_output_in_event": False,
            "emit_event_on_exit_codes": [0, 3],
            "success_exit_codes": [0, 3],
            "retry_on_exit_codes": [75],
            "stdout_max_bytes": 4096,
            "stderr_max_bytes": 4096,
        },
    }
    config_dir.extra = {"api": {"enabled": False}}
    config_dir.write()
    code, body = ductile_json(config_dir, "config", "check", "--strict")
    assert (code, body["errors"], body["warnings"]) == (0, [], [])
