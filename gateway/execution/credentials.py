"""The spawning thread as another user for one spawn (`sandbox.user` without bubblewrap; docs/sandbox.md).

Linux keeps credentials per thread; glibc's setresuid() changes every thread of the process at
once (it signals them all), but the raw system calls change the calling thread only, and a
vfork's child takes its thread's credentials. So the spawning thread drops to the plugin's uid and
gid with no supplementary groups, spawns, sets the plugin's limits, and takes root back: the
plugin is another uid from its exec on, at the cost of six system calls, where a `setpriv`
wrapper costs an exec (about 1.2 ms per spawn, issue 39).

Why the limits are set inside: prlimit() on a process of another uid needs CAP_SYS_RESOURCE,
which a container's root often lacks; with the thread's real uid and gid those of the plugin, the
kernel lets it, as for one's own process (lowering only: the limits are never above the daemon's).

The saved uid stays 0 while the thread is the plugin's user, so the thread may take root back
(the kernel keeps its permitted capabilities); exec sets the plugin's saved ids to its effective
ones, so the plugin keeps none of it. What this does not give, which setpriv did: no_new_privs
(per thread and irreversible), so a setuid program the plugin runs still works as it does for
any user.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Iterator
from contextlib import contextmanager

from gateway.execution.libc import LIBC, check
from gateway.plugins.sandboxing import CREDENTIAL_SYSCALLS


def _call(number: int, *args: object, what: str) -> None:
    check(LIBC.syscall(number, *args), what)


@contextmanager
def as_user(uid: int, gid: int) -> Iterator[None]:
    """The calling thread as `uid`:`gid` (no supplementary groups) for the block; root again after."""
    setgroups, setresuid, setresgid = CREDENTIAL_SYSCALLS[platform.machine()]
    groups, uids, gids = os.getgroups(), os.getresuid(), os.getresgid()
    _call(setgroups, 0, None, what="setgroups")
    try:
        _call(setresgid, gid, gid, gids[2], what="setresgid")
        try:
            _call(setresuid, uid, uid, uids[2], what="setresuid")
            try:
                yield
            finally:
                _call(setresuid, *uids, what="setresuid back")
        finally:
            _call(setresgid, *gids, what="setresgid back")
    finally:
        array = (ctypes.c_uint * len(groups))(*groups)
        _call(setgroups, len(groups), array, what="setgroups back")
