"""How a plugin's `sandbox:` is enforced on this host (docs/sandbox.md), decided once per load.

`confine` turns a plugin's Sandbox into a Confinement: the programs its entrypoint runs under
(bubblewrap for `filesystem: strict`, setpriv for `user:`), the resource limits the runner sets
right after the spawn, and the network namespace it is spawned into. When this host lacks a
mechanism the profile needs (not root, no CAP_SYS_ADMIN, no bwrap, no user namespaces, an unknown
user, a writable path that does not exist) it raises Unconfinable with the reason, and the registry
skips the plugin with it (`plugin list`, `system doctor`): a plugin never runs less isolated than
its config says.
"""

from __future__ import annotations

import grp
import os
import platform
import pwd
import resource
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from gateway.config.sandbox import HOST, STRICT, Limits, Sandbox

# Bit 21 of the capability sets (linux/capability.h): setns() and unshare() of a network namespace.
CAP_SYS_ADMIN = 21
# (setgroups, setresuid, setresgid) system call numbers by machine, for switching one thread's
# credentials (gateway.execution.credentials); elsewhere `user:` goes through setpriv.
CREDENTIAL_SYSCALLS = {"x86_64": (116, 117, 119), "aarch64": (159, 147, 149)}


class Unconfinable(Exception):
    """This host cannot enforce a plugin's profile; the message says which mechanism is missing."""


@dataclass(frozen=True)
class Confinement:
    """What the runner does around one spawn of the plugin (gateway.execution.runner)."""

    # Run before the entrypoint (absolute paths); empty under the host profile: then the runner
    # spawns the entrypoint itself, as it always did.
    wrapper: tuple[str, ...] = ()
    # (RLIMIT_*, value) set soft = hard with prlimit(pid) right after the spawn. With a wrapper
    # the limits are set by `prlimit` at its head instead, and this is empty (`confine`).
    rlimits: tuple[tuple[int, int], ...] = ()
    network: str = HOST
    egress: tuple[str, ...] = ()
    # (uid, gid) the spawning thread takes for the spawn (`user:` without bubblewrap): the plugin
    # is that user from its exec on, with no wrapper to exec (gateway.execution.credentials).
    credentials: tuple[int, int] | None = None
    # Sandbox.describe(): recorded on each attempt, shown by the console and `job inspect`.
    profile: str = ""


def confine(sandbox: Sandbox, plugin_dir: Path) -> Confinement:
    """The Confinement of `sandbox` for a plugin whose files are in `plugin_dir`, or Unconfinable."""
    if sandbox.network != HOST and not has_capability(CAP_SYS_ADMIN):
        raise Unconfinable(
            f"network: {sandbox.network} needs CAP_SYS_ADMIN (a daemon running as root) to enter a "
            "network namespace, and this process does not have it"
        )
    limits = _rlimits(sandbox.limits)
    wrapper: list[str] = []
    credentials = None
    if sandbox.filesystem == STRICT:
        wrapper += _bubblewrap(sandbox, plugin_dir)
    if sandbox.user is not None and not wrapper and platform.machine() in CREDENTIAL_SYSCALLS:
        credentials = _credentials(sandbox.user)
    elif sandbox.user is not None:
        wrapper += _setpriv(sandbox.user)
    if wrapper and limits:
        # Before the program that clones (bwrap) or changes uid (setpriv): after either, a limit
        # set from outside would miss the plugin or be refused (prlimit() on another uid's
        # process needs CAP_SYS_RESOURCE, which a container's root often lacks).
        wrapper[:0] = [_program("prlimit", "util-linux"), *_prlimit_options(limits), "--"]
    return Confinement(
        wrapper=tuple(wrapper),
        rlimits=() if wrapper else limits,
        network=sandbox.network,
        egress=sandbox.egress,
        credentials=credentials,
        profile=sandbox.describe(),
    )


def _rlimits(limits: Limits) -> tuple[tuple[int, int], ...]:
    """Each configured limit, never above this process's own hard limit: prlimit() refuses a
    raise without CAP_SYS_RESOURCE, and a plugin gets no more than its daemon has."""
    wanted = (
        (resource.RLIMIT_DATA, limits.memory),
        (resource.RLIMIT_CPU, limits.cpu),
        (resource.RLIMIT_NOFILE, limits.open_files),
        (resource.RLIMIT_FSIZE, limits.file_size),
        (resource.RLIMIT_NPROC, limits.processes),
    )
    found = []
    for which, value in wanted:
        if value is None:
            continue
        hard = resource.getrlimit(which)[1]
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        found.append((which, value))
    return tuple(found)


_PRLIMIT_OPTION = {
    resource.RLIMIT_DATA: "--data",
    resource.RLIMIT_CPU: "--cpu",
    resource.RLIMIT_NOFILE: "--nofile",
    resource.RLIMIT_FSIZE: "--fsize",
    resource.RLIMIT_NPROC: "--nproc",
}


def _prlimit_options(limits: tuple[tuple[int, int], ...]) -> list[str]:
    return [f"{_PRLIMIT_OPTION[which]}={':'.join(map(str, rlimit_pair(which, value)))}" for which, value in limits]


def rlimit_pair(which: int, value: int) -> tuple[int, int]:
    """(soft, hard) for a configured limit: the hard one a second more for CPU, so the plugin gets
    SIGXCPU (which it may catch to say so) before the kernel's SIGKILL; the same value otherwise."""
    return value, value + 1 if which == resource.RLIMIT_CPU else value


def _bubblewrap(sandbox: Sandbox, plugin_dir: Path) -> list[str]:
    """A read-only view of the host, a private /tmp and /dev, its own PID and IPC namespaces, no
    capabilities (but the two setpriv needs to drop to `user:`, which it loses with the uid), and
    it dies with the thread that spawned it. The plugin's own directory is bound again after /tmp,
    so a plugin kept under /tmp stays readable."""
    bwrap = _program("bwrap", "bubblewrap")
    reason = _bubblewrap_fails(bwrap)
    if reason:
        raise Unconfinable(f"filesystem: strict needs bubblewrap, which cannot start a sandbox here: {reason}")
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    argv += ["--ro-bind", str(plugin_dir), str(plugin_dir)]
    for path in sandbox.writable:
        if not path.is_dir():
            raise Unconfinable(f"writable path {path} is not a directory on this host")
        argv += ["--bind", str(path), str(path)]
    argv += ["--unshare-pid", "--unshare-ipc", "--die-with-parent", "--cap-drop", "ALL"]
    if sandbox.user is not None:
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    return [*argv, "--"]


@cache
def _bubblewrap_fails(bwrap: str) -> str | None:
    """Why bwrap cannot make a sandbox in this process's situation (no user namespaces for an
    unprivileged daemon, a seccomp filter refusing clone flags), found by trying once."""
    try:
        done = subprocess.run(
            [bwrap, "--ro-bind", "/", "/", "--unshare-pid", "--die-with-parent", "--cap-drop", "ALL", "--", "true"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return done.stderr.decode(errors="replace").strip() or f"exit code {done.returncode}" if done.returncode else None


def _credentials(user: str) -> tuple[int, int]:
    """(uid, gid) of `user` (name or uid, `:group` optional; else the user's primary group), which
    only a root daemon can switch to."""
    if os.geteuid() != 0:
        raise Unconfinable(
            f"user: {user} needs the daemon to run as root (it runs as uid {os.geteuid()}) to switch users"
        )
    return resolve_user(user)


def _setpriv(user: str) -> list[str]:
    """Drop to `user` with no supplementary groups and no way back to privileges (no_new_privs:
    setuid binaries and file capabilities grant nothing): under bubblewrap, whose capabilities
    are dropped but for the two setpriv needs, and on machines without `CREDENTIAL_SYSCALLS`."""
    uid, gid = _credentials(user)
    setpriv = _program("setpriv", "util-linux")
    return [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--no-new-privs", "--"]


def resolve_user(user: str) -> tuple[int, int]:
    """(uid, gid) of `name`, `uid`, `name:group` or `uid:gid`; Unconfinable when unknown here."""
    name, _, group = user.partition(":")
    try:
        entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
        uid, gid = entry.pw_uid, entry.pw_gid
    except KeyError:
        if not name.isdigit():
            raise Unconfinable(f"user {name!r} does not exist on this host") from None
        uid, gid = int(name), int(name)
    if group:
        try:
            gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
        except KeyError:
            raise Unconfinable(f"group {group!r} does not exist on this host") from None
    if uid == 0:
        raise Unconfinable(f"user {user!r} is root: a plugin's own user must not be")
    return uid, gid


def _program(name: str, package: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")
    if found is None:
        raise Unconfinable(f"{name} is not installed (package {package})")
    return found


def has_capability(bit: int) -> bool:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> bit & 1)
    return False
