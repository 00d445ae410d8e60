"""restic_backup: `restic backup` through the runtime, against a local repository made with
Debian's restic (CI installs it), with the original's config keys (issue 34).

restic stands behind a shim on the plugins' PATH that records every argv (restic's and curl's),
so the tests can show that no secret is ever a process argument. One repository serves the
module: making one costs restic's key derivation (~3 s); each job that opens it, ~0.7 s.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ledger.models import Job, JobLog
from ledger.states import JobStatus
from tests.support.config_dirs import ConfigDir
from tests.support.jobs import last_response, run_job
from tests.support.network import free_port
from tests.support.processes import ductile_json
from tests.support.runtime import load_runtime

RESTIC = shutil.which("restic")
# Real commits: the jobs run on the worker daemon's thread (run_until_idle), on a connection of its own.
pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(RESTIC is None, reason="restic is not installed here (.ci/run installs Debian's restic)"),
    pytest.mark.django_db(transaction=True),
]

PASSWORD = "correct horse battery staple 34"
REST_CREDENTIALS = "backupuser:rest-secret-9"  # user:password of a rest: repository's URL


def restic_env(repository: Path, password: str = PASSWORD) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "XDG_CACHE_HOME": os.environ["XDG_CACHE_HOME"],
        "RESTIC_REPOSITORY": str(repository),
        "RESTIC_PASSWORD": password,
    }


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("restic") / "repo"
    assert RESTIC is not None
    subprocess.run([RESTIC, "init"], env=restic_env(repo), check=True, capture_output=True, timeout=60)
    return repo


@pytest.fixture
def argv_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """restic and curl behind shims that append their arguments to a file, first on the PATH the
    plugins get (taken when the runtime loads)."""
    shims, log = tmp_path / "shims", tmp_path / "argv.log"
    shims.mkdir()
    log.touch()
    for tool in ("restic", "curl"):
        real = shutil.which(tool)
        if real is None:
            continue
        shim = shims / tool
        shim.write_text(f'#!/bin/sh\nprintf "%s\\n" "{tool} $*" >>{log}\nexec {real} "$@"\n')
        shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}:{os.environ['PATH']}")
    return log


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "keep.txt").write_text("kept\n")
    (src / "sub" / "deep.txt").write_text("deep\n")
    (src / "skip.log").write_text("excluded\n")
    return src


def env_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "restic.env"
    path.write_text(text)
    path.chmod(mode)
    return path


def secrets_for(repository: Path, password: str = PASSWORD) -> str:
    return f'export RESTIC_REPOSITORY={repository}\nRESTIC_PASSWORD="{password}"\n'


def runtime_with(config_dir: ConfigDir, **config: Any) -> Any:
    config_dir.service["plugin_env_passthrough"] = ["XDG_CACHE_HOME"]  # restic's cache in the test's tmp
    config_dir.plugins["restic_backup"] = {"config": config, "retry": {"max_attempts": 2}}
    return load_runtime(config_dir)


def assert_no_secret_anywhere(*secrets: str, argv_log: Path | None = None) -> None:
    """Not in any job's recorded answer, stderr or error, nor in any argument of restic or curl."""
    texts = [json.dumps(list(JobLog.objects.values("result", "stderr", "last_error")))]
    texts += [json.dumps(list(Job.objects.values("last_error")))]
    if argv_log is not None:
        texts.append(argv_log.read_text())
    for secret in secrets:
        assert not any(secret in text for text in texts), f"{secret!r} leaked"


def warnings_of(job: Job) -> list[str]:
    return [log["message"] for log in last_response(job)["logs"] if log["level"] == "warn"]


def test_poll_backs_up_the_paths_with_excludes_tag_and_host_and_no_secret_is_an_argument(
    config_dir: ConfigDir, tmp_path: Path, repository: Path, source: Path, argv_log: Path
) -> None:
    secrets = env_file(tmp_path, secrets_for(repository))
    runtime = runtime_with(
        config_dir, env_file=str(secrets), paths=[str(source)], excludes=["*.log"], host="pinned-host", tag="nightly"
    )
    job = run_job(runtime, "restic_backup")
    assert job.status == JobStatus.SUCCEEDED, job.last_error
    result = last_response(job)["result"]
    match = re.fullmatch(
        rf"backup ok -> {repository} : Added to the repo.* processed 2 files, .* snapshot ([0-9a-f]{{8}}) saved", result
    )
    assert match, result
    assert RESTIC is not None
    listing = subprocess.run(
        [RESTIC, "ls", "--json", match.group(1)], env=restic_env(repository), capture_output=True, text=True, timeout=60
    )
    snapshot, *nodes = (json.loads(line) for line in listing.stdout.splitlines())
    assert (snapshot["tags"], snapshot["hostname"], snapshot["paths"]) == (["nightly"], "pinned-host", [str(source)])
    files = {node["path"] for node in nodes if node["type"] == "file"}
    assert files == {f"{source}/keep.txt", f"{source}/sub/deep.txt"}  # skip.log excluded
    assert "restic backup --tag=nightly --host=pinned-host --exclude=*.log --" in argv_log.read_text()
    assert_no_secret_anywhere(PASSWORD, argv_log=argv_log)


def test_health_checks_the_repository_and_the_password(
    config_dir: ConfigDir, tmp_path: Path, repository: Path, source: Path, argv_log: Path
) -> None:
    secrets = env_file(tmp_path, secrets_for(repository))
    runtime = runtime_with(config_dir, env_file=str(secrets), paths=[str(source)])
    job = run_job(runtime, "restic_backup", command="health")
    assert job.status == JobStatus.SUCCEEDED
    assert last_response(job)["result"] == f"repo reachable + creds ok: {repository}"

    wrong = "not-the-password-77"
    env_file(tmp_path, secrets_for(repository, wrong))
    job = run_job(runtime, "restic_backup", command="health")
    assert job.status == JobStatus.FAILED
    assert job.last_error == (
        f"repo {repository} reachable but restic cat config failed (bad password?): "
        "Fatal: wrong password or no key found"
    )
    # A wrong password fails the same way on every try: no retry.
    job = run_job(runtime, "restic_backup")
    assert (job.status, job.attempt) == (JobStatus.FAILED, 1)
    # rc 1 from restic before 0.17 (Debian 12's), 12 from later ones.
    failed = r"restic backup failed \(rc=(1|12)\): Fatal: wrong password or no key found"
    assert re.fullmatch(failed, job.last_error or ""), job.last_error
    assert_no_secret_anywhere(PASSWORD, wrong, argv_log=argv_log)


def test_a_dead_rest_primary_falls_back_and_its_credentials_are_never_shown(
    config_dir: ConfigDir, tmp_path: Path, repository: Path, source: Path, argv_log: Path
) -> None:
    port = free_port()  # nothing listens there: refused at once
    primary = f"rest:http://{REST_CREDENTIALS}@127.0.0.1:{port}/repo/"
    secrets = env_file(
        tmp_path, f"RESTIC_REPOSITORY={primary}\nRESTIC_REPOSITORY_FALLBACK={repository}\nRESTIC_PASSWORD={PASSWORD}\n"
    )
    runtime = runtime_with(config_dir, env_file=str(secrets), paths=str(source))
    job = run_job(runtime, "restic_backup", command="handle", payload={"from": "a route"})
    assert job.status == JobStatus.SUCCEEDED, job.last_error
    assert last_response(job)["result"].startswith(f"backup ok -> {repository} : ")
    assert warnings_of(job) == [f"restic repository rest:http://127.0.0.1:{port}/repo/ is not reachable"]
    assert "curl -K -" in argv_log.read_text()  # the URL went to curl on its stdin

    env_file(tmp_path, f"RESTIC_REPOSITORY={primary}\nRESTIC_REPOSITORY_FALLBACK={primary}x/\nRESTIC_PASSWORD=p4ss\n")
    job = run_job(runtime, "restic_backup")
    assert (job.status, job.attempt) == (JobStatus.QUEUED, 2)  # the network may come back: retried
    assert job.last_error == "no reachable restic repo (primary or fallback)"
    assert_no_secret_anywhere(PASSWORD, REST_CREDENTIALS, "p4ss", argv_log=argv_log)


@pytest.mark.parametrize(
    ("paths", "error"),
    [
        # restic saves a snapshot without what it could not read (/proc/self/mem answers EIO).
        (["SRC", "/proc/self/mem"], "restic backup incomplete (rc=3: some source files could not be read"),
        (["/nonexistent/ductile-test"], "restic backup failed (rc=1): "),
    ],
)
def test_an_incomplete_backup_and_absent_paths_fail_without_retry(
    config_dir: ConfigDir, tmp_path: Path, repository: Path, source: Path, paths: list[str], error: str
) -> None:
    secrets = env_file(tmp_path, secrets_for(repository))
    runtime = runtime_with(config_dir, env_file=str(secrets), paths=[p.replace("SRC", str(source)) for p in paths])
    job = run_job(runtime, "restic_backup")
    assert (job.status, job.attempt) == (JobStatus.FAILED, 1)
    assert (job.last_error or "").startswith(error), job.last_error


@pytest.mark.parametrize(
    ("secrets", "config", "error"),
    [
        (None, {}, "RESTIC_PASSWORD not set (env_file ENV does not exist or cannot be read): set RESTIC_PASSWORD"),
        ("RESTIC_REPOSITORY=/srv/x\n", {}, "RESTIC_PASSWORD not set (env_file=ENV): set RESTIC_PASSWORD"),
        ("RESTIC_PASSWORD=pw-1234\n", {}, "RESTIC_REPOSITORY not set (env_file=ENV): set RESTIC_REPOSITORY"),
        ("REPO", {"paths": []}, "no source paths configured"),
        ("REPO", {"paths": 5}, "config.paths must be a string or a list of strings"),
        ("REPO", {"excludes": {"a": 1}}, "config.excludes must be a string or a list of strings"),
        ("REPO", {"tag": [1]}, "config.tag must be a string or a list of strings"),
    ],
)
def test_refusals_fail_without_retry_and_without_running_restic(
    config_dir: ConfigDir,
    tmp_path: Path,
    repository: Path,
    source: Path,
    argv_log: Path,
    secrets: str | None,
    config: dict[str, Any],
    error: str,
) -> None:
    path = tmp_path / "restic.env"
    if secrets is not None:
        env_file(tmp_path, secrets_for(repository) if secrets == "REPO" else secrets)
    runtime = runtime_with(config_dir, **{"env_file": str(path), "paths": [str(source)], **config})
    job = run_job(runtime, "restic_backup")
    assert (job.status, job.attempt) == (JobStatus.FAILED, 1)
    assert (job.last_error or "").startswith(error.replace("ENV", str(path))), job.last_error
    assert "restic" not in argv_log.read_text()


def test_env_file_is_read_not_run_and_its_odd_lines_are_warned_about(
    config_dir: ConfigDir, tmp_path: Path, repository: Path
) -> None:
    marker = tmp_path / "ran"
    secrets = env_file(
        tmp_path,
        f"# the original sources this file\n{secrets_for(repository)}touch {marker}\nPATH=/nowhere\nlower=case\n",
        mode=0o644,
    )
    # No paths: the answer (a refusal) comes before restic would run, its warnings with it.
    runtime = runtime_with(config_dir, env_file=str(secrets), paths=[])
    job = run_job(runtime, "restic_backup")
    assert job.last_error == "no source paths configured"
    assert not marker.exists()
    assert warnings_of(job) == [
        f"env_file {secrets} line 4 is not KEY=VALUE with an upper-case KEY: ignored",
        f"env_file {secrets} line 5 sets PATH, which would change how this plugin runs: ignored",
        f"env_file {secrets} line 6 is not KEY=VALUE with an upper-case KEY: ignored",
        f"env_file {secrets} can be read by others than its owner: chmod 600 it",
    ]


def test_config_check_strict_passes_a_config_written_for_the_original(config_dir: ConfigDir, tmp_path: Path) -> None:
    config_dir.plugins = {
        "restic_backup": {
            "schedules": [{"cron": "30 2 * * *"}],
            "timeouts": {"poll": "2h"},
            "config": {
                "env_file": str(tmp_path / "restic.env"),
                "paths": [str(tmp_path)],
                "excludes": ["*.tmp"],
                "host": "workstation",
                "tag": "nightly",
            },
        }
    }
    config_dir.extra = {"api": {"enabled": False}}  # strict mode would also want an API token
    config_dir.write()
    code, body = ductile_json(config_dir, "config", "check", "--strict")
    assert (code, body["errors"], body["warnings"]) == (0, [], []), body
