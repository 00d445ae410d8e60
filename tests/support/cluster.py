"""A cluster on one machine (issue 38): nodes as Linux network namespaces joined by a bridge,
PostgreSQL in a namespace of its own, every node reaching it over the bridge only. Needs root.

Addresses come from 198.18.0.0/15, RFC 2544's range for benchmarking networks: never a real LAN.
The host (where the test runs) has the bridge's first address, so the test reads the ledger the
way an operator's machine would.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.checkout import REPO
from tests.support.config_dirs import ConfigDir
from tests.support.processes import cli_env

PG_PORT = 5432


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, text=True, timeout=60)


def _postgres_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        raise RuntimeError("PostgreSQL server binaries not found (apt-get install postgresql)")
    return found[-1].parent


def available() -> str | None:
    """Why a cluster cannot be made here, or None when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 (`ip`) is not installed"
    try:
        _postgres_bin()
    except RuntimeError as exc:
        return str(exc)
    return None


@dataclass
class Cluster:
    tag: str
    subnet: str  # the first three octets, e.g. "198.18.41"
    workdir: Path
    nodes: tuple[str, ...]
    processes: list[subprocess.Popen[str]] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"dbr{self.tag}"

    def namespace(self, node: str) -> str:
        return f"dct-{self.tag}-{node}"

    def link(self, node: str) -> str:
        """The host side of a node's cable to the bridge (at most 15 characters)."""
        return f"dv{self.tag}{node[:4]}"

    def address(self, node: str) -> str:
        return f"{self.subnet}.{2 if node == 'pg' else 10 + self.nodes.index(node)}"

    @property
    def database_url(self) -> str:
        return f"postgresql://postgres@{self.address('pg')}:{PG_PORT}/postgres"

    # -- building and taking down -------------------------------------------------------------

    def build(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for node in ("pg", *self.nodes):
            namespace = self.namespace(node)
            _run("ip", "netns", "add", namespace)
            _run("ip", "link", "add", self.link(node), "type", "veth", "peer", "name", "eth0", "netns", namespace)
            _run("ip", "link", "set", self.link(node), "master", self.bridge, "up")
            _run("ip", "netns", "exec", namespace, "ip", "addr", "add", f"{self.address(node)}/24", "dev", "eth0")
            _run("ip", "netns", "exec", namespace, "ip", "link", "set", "eth0", "up")
            _run("ip", "netns", "exec", namespace, "ip", "link", "set", "lo", "up")
        self._start_postgres()

    def _start_postgres(self) -> None:
        bindir = _postgres_bin()
        data = self.workdir / "pg"
        shutil.chown(self.workdir, "postgres", "postgres")
        _run("runuser", "-u", "postgres", "--", str(bindir / "initdb"), "-D", str(data), "-U", "postgres",
             "--auth=trust", "-E", "UTF8")  # fmt: skip
        with (data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {self.subnet}.0/24 trust\n")
        options = (
            f"-p {PG_PORT} -k {self.workdir} -c listen_addresses={self.address('pg')} -c fsync=off"
            " -c max_connections=200"
        )
        _run("ip", "netns", "exec", self.namespace("pg"), "runuser", "-u", "postgres", "--", str(bindir / "pg_ctl"),
             "-D", str(data), "-l", str(self.workdir / "pg.log"), "-w", "-t", "60", "-o", options, "start")  # fmt: skip

    def close(self) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        bindir = _postgres_bin()
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(bindir / "pg_ctl"), "-D", str(self.workdir / "pg"), "-m",
             "immediate", "stop"],
            capture_output=True, timeout=60,
        )  # fmt: skip
        for node in ("pg", *self.nodes):
            subprocess.run(["ip", "netns", "del", self.namespace(node)], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=30)
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- what a test does with it -------------------------------------------------------------

    def start(
        self, node: str, config: ConfigDir, *args: str, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[str]:
        """`manage.py <args>` on `node`, against the cluster's PostgreSQL. Its output (stderr with
        it) is a pipe: read it (tests.support.output.Output), or the daemon blocks once it is full."""
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.namespace(node), sys.executable, str(REPO / "manage.py"), *args,
             "--config-dir", str(config.path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=cli_env(config, DATABASE_URL=self.database_url, **(env or {})),
            cwd=REPO,
        )  # fmt: skip
        self.processes.append(proc)
        return proc

    def cut(self, node: str) -> None:
        """A partition: the node's cable is unplugged (no reset reaches either side)."""
        _run("ip", "link", "set", self.link(node), "down")

    def mend(self, node: str) -> None:
        _run("ip", "link", "set", self.link(node), "up")


@contextmanager
def cluster(nodes: tuple[str, ...] = ("a", "b", "c")) -> Iterator[Cluster]:
    """A cluster of `nodes` (short names) with PostgreSQL, taken down afterwards whatever happens."""
    tag = secrets.token_hex(3)
    in_use = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, timeout=30).stdout
    while True:  # another cluster of this host (a parallel test) may hold one: never share it
        subnet = f"198.{18 + secrets.randbelow(2)}.{secrets.randbelow(256)}"
        if f" {subnet}." not in in_use:
            break
    # Not pytest's tmp_path: the postgres user must reach the data directory (/tmp is traversable).
    made = Cluster(tag, subnet, Path(tempfile.mkdtemp(prefix="ductile-cluster-", dir="/tmp")), nodes)
    try:
        made.build()
        yield made
    finally:
        made.close()
