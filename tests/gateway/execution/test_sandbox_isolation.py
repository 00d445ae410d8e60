"""What a plugin under each sandbox profile can reach (issue 39, docs/sandbox.md): the `intruder`
test plugin (tests/plugins/intruder) tries it for real and answers with what happened, and the
test reads that, or the job's end, as a user would. The namespaces, bubblewrap and another uid
need root (CI runs as root); without it these tests skip with the reason."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from gateway.config.sandbox import physical_memory, size_text
from ledger.models import EgressHost, JobAttempt
from ledger.states import JobStatus
from tests.gateway.execution.test_sandbox_limits import intruder
from tests.support.config_dirs import ConfigDir
from tests.support.jobs import last_log, last_response
from tests.support.network import http_server
from tests.support.waiting import wait_for

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces, bubblewrap and setpriv need root (CI has it)"),
]


class Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello from the test"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def loopback_url() -> Iterator[str]:
    with http_server(Hello) as port:
        yield f"http://127.0.0.1:{port}/"


def did(job: Any) -> Any:
    assert job.status == JobStatus.SUCCEEDED, job.status
    return last_response(job)["result"]["did"]


def test_on_the_host_network_the_plugin_reaches_the_tests_loopback_server(
    config_dir: ConfigDir, loopback_url: str
) -> None:
    assert did(intruder(config_dir, {"try": "fetch", "url": loopback_url})) == "hello from the test"


def test_under_network_none_the_plugin_reaches_nothing_not_even_the_hosts_loopback(
    config_dir: ConfigDir, loopback_url: str
) -> None:
    job = intruder(config_dir, {"try": "fetch", "url": loopback_url}, {"network": "none"})
    assert did(job) == "refused: <urlopen error [Errno 101] Network is unreachable>"
    port = int(loopback_url.rsplit(":", 1)[1].strip("/"))
    job = intruder(config_dir, {"try": "connect", "host": "127.0.0.1", "port": port}, {"network": "none"})
    assert did(job) == "refused: [Errno 101] Network is unreachable"
    # The worker's own thread is back in the gateway's namespace: the next plugin on the host
    # profile reaches the server again.
    assert did(intruder(config_dir, {"try": "fetch", "url": loopback_url})) == "hello from the test"


# -- filesystem: strict (bubblewrap) and user: --------------------------------------------------


# Users with no passwd entry, one per test: RLIMIT_NPROC counts every process of a uid, so a test
# on another xdist worker must not share one (nor may the host's own `nobody`).
READER = 39001
FORKERS = {"host": 39002, "strict": 39003}


def processes_of(uid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and os.stat(f"/proc/{name}").st_uid == uid:
                found.append(int(name))
        except FileNotFoundError:
            pass
    return found


@pytest.fixture
def root_only() -> Iterator[Path]:
    """A file only root may read, outside /tmp (which is the sandbox's own under strict)."""
    secret = Path("/var/tmp") / f"root-only-39-{os.getpid()}"
    secret.write_text("the daemon's secret")
    secret.chmod(0o600)
    yield secret
    secret.unlink()


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """A process of the daemon's user (root) that a plugin must neither see nor signal."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


def test_under_filesystem_strict_the_plugin_writes_only_its_writable_paths_and_sees_only_its_own_processes(
    config_dir: ConfigDir, tmp_path: Path, bystander: subprocess.Popen[bytes]
) -> None:
    writable = tmp_path / "writable"
    writable.mkdir()
    sandbox = {"filesystem": "strict", "writable": [str(writable)]}
    # Outside /tmp, which is private under strict: a write there would land in the sandbox's own.
    outside = Path("/var/tmp") / f"intruder-39-{os.getpid()}.txt"
    job = intruder(config_dir, {"try": "write", "path": str(outside)}, sandbox)
    assert did(job) == f"refused: [Errno 30] Read-only file system: '{outside}'"
    assert not outside.exists()
    job = intruder(config_dir, {"try": "write", "path": str(outside)})
    assert did(job) == "written"  # on the host profile: the test is not vacuous
    outside.unlink()
    assert did(intruder(config_dir, {"try": "write", "path": str(writable / "ok.txt")}, sandbox)) == "written"
    assert (writable / "ok.txt").read_text() == "intruder was here"
    # Its /tmp is its own: what it writes there is gone with it.
    assert did(intruder(config_dir, {"try": "write", "path": "/tmp/intruder-39.txt"}, sandbox)) == "written"
    assert not Path("/tmp/intruder-39.txt").exists()
    # Its own PID namespace: neither the worker (this process) nor the bystander is there.
    seen = did(intruder(config_dir, {"try": "processes"}, sandbox))
    assert len(seen) <= 4, seen
    job = intruder(config_dir, {"try": "signal", "pid": bystander.pid}, sandbox)
    assert did(job) == "refused: [Errno 3] No such process"
    assert bystander.poll() is None
    # The same plugin on the host profile sees them (the test is not vacuous).
    assert {os.getpid(), bystander.pid} <= set(did(intruder(config_dir, {"try": "processes"})))


def test_as_its_own_user_the_plugin_cannot_read_root_only_files_nor_signal_the_daemons_processes(
    config_dir: ConfigDir, root_only: Path, bystander: subprocess.Popen[bytes]
) -> None:
    job = intruder(config_dir, {"try": "read", "path": str(root_only)}, {"user": READER})
    assert did(job) == f"refused: [Errno 13] Permission denied: '{root_only}'"
    assert last_response(job)["result"]["uid"] == READER
    job = intruder(config_dir, {"try": "signal", "pid": bystander.pid}, {"user": READER})
    assert did(job) == "refused: [Errno 1] Operation not permitted"
    assert bystander.poll() is None
    # Root inside bubblewrap with every capability dropped still owns root's files: only another
    # uid keeps them from it (issue 39's table), with or without the strict filesystem.
    assert did(intruder(config_dir, {"try": "read", "path": str(root_only)}, {"filesystem": "strict"})) == (
        "the daemon's secret"
    )
    job = intruder(config_dir, {"try": "read", "path": str(root_only)}, {"filesystem": "strict", "user": READER})
    assert did(job) == f"refused: [Errno 13] Permission denied: '{root_only}'"


@pytest.mark.parametrize("filesystem", ["host", "strict"])
def test_as_its_own_user_forking_past_the_process_limit_is_refused(config_dir: ConfigDir, filesystem: str) -> None:
    """RLIMIT_NPROC binds a plugin with a uid of its own (the kernel never applies it to root)."""
    uid = FORKERS[filesystem]
    # The limit counts every process of the uid: wait out an earlier run's children being reaped.
    wait_for(lambda: not processes_of(uid), what=f"no process of uid {uid} left", timeout=15)
    sandbox = {"user": uid, "filesystem": filesystem, "limits": {"processes": 8}}
    job = intruder(config_dir, {"try": "fork", "count": 30}, sandbox)
    assert did(job) == "refused: [Errno 11] Resource temporarily unavailable"
    assert did(intruder(config_dir, {"try": "fork", "count": 30}, {"user": uid})) == "forked 30"


def test_under_filesystem_strict_the_limits_bind_the_plugin_inside_the_sandbox(config_dir: ConfigDir) -> None:
    job = intruder(config_dir, {"try": "allocate", "mb": 256}, {"filesystem": "strict", "limits": {"memory": "64MB"}})
    assert job.status == JobStatus.DEAD
    assert "MemoryError" in (last_log(job).stderr or "")


# -- network: egress ---------------------------------------------------------------------------


@pytest.fixture
def second_url() -> Iterator[str]:
    with http_server(Hello) as port:
        yield f"http://127.0.0.1:{port}/"


def test_under_egress_an_allowed_host_passes_an_unlisted_one_is_refused_and_the_ledger_records_both(
    config_dir: ConfigDir, loopback_url: str, second_url: str
) -> None:
    allowed = urlsplit(loopback_url).netloc
    sandbox = {"network": "egress", "egress": [allowed]}
    job = intruder(config_dir, {"try": "fetch_each", "urls": [loopback_url, second_url, loopback_url]}, sandbox)
    assert did(job) == ["hello from the test", "refused: HTTP Error 403: Forbidden", "hello from the test"]
    # The attempt records the profile it ran under.
    assert JobAttempt.objects.get(job_id=job.id).sandbox == (
        f"network=egress[{allowed}] filesystem=host limits=memory:{size_text(physical_memory())},"
        "cpu:3600s,files:8192,fsize:32GB,nproc:4096"
    )
    assert EgressHost.objects.of_job(job.id) == [
        {"attempt": 1, "host": allowed, "verdict": "allowed", "requests": 2},
        {"attempt": 1, "host": urlsplit(second_url).netloc, "verdict": "refused", "requests": 1},
    ]
    # The proxy is the only way out: a connection that ignores it reaches nothing.
    job = intruder(config_dir, {"try": "connect", "host": "127.0.0.1", "port": urlsplit(loopback_url).port}, sandbox)
    assert did(job) == "refused: [Errno 111] Connection refused"
    assert EgressHost.objects.of_job(job.id) == []
    summed = EgressHost.objects.by_plugin("intruder")
    assert sorted((row["host"], row["verdict"], row["requests"], row["jobs"]) for row in summed) == sorted(
        [(allowed, "allowed", 2, 1), (urlsplit(second_url).netloc, "refused", 1, 1)]
    )
