"""The network namespaces plugins are spawned into (`network: none`, `network: egress`; docs/sandbox.md).

A namespace is made once per process, on first use, by a short-lived thread that unshares its own
network namespace and opens it: the open descriptor keeps the namespace alive after the thread is
gone, and the kernel frees it when this process closes it or dies, so nothing is left to clean
up on the host (no named namespace under /run/netns, no interface). The spawning thread enters it
with setns() around posix_spawn only (namespaces are per thread, and the child of a vfork takes
its thread's), then returns to the process's own: the spawn costs two system calls more.

`none` is an empty namespace: not even a loopback that is up, so the plugin reaches nothing, the
host's own services on 127.0.0.1 included. `egress` holds only a loopback on which the gateway's
egress proxy listens (gateway.execution.egress): the proxy's socket was made inside it, its
outgoing connections are made from the host's namespace, so the proxy is the plugin's only way out.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from gateway.execution.libc import LIBC, check

CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1

T = TypeVar("T")


class NetworkNamespace:
    """One namespace of this process, and a way to run a spawn inside it."""

    def __init__(self, fd: int):
        self.fd = fd

    @contextmanager
    def entered(self) -> Iterator[None]:
        """The calling thread inside this namespace for the block, back in the process's after."""
        home = _home()
        check(LIBC.setns(self.fd, CLONE_NEWNET), "setns into the plugin's network namespace")
        try:
            yield
        finally:
            # Failing here would leave this thread (its next database connection) cut off: never
            # expected with the capability the first setns had; loud if it happens.
            check(LIBC.setns(home, CLONE_NEWNET), "setns back into the gateway's network namespace")


def make_namespace(inside: Callable[[], T] | None = None) -> tuple[NetworkNamespace, T | None]:
    """A new network namespace, and what `inside` returned, run in it (by a thread of its own,
    which makes its sockets there); raises OSError without CAP_SYS_ADMIN."""
    made: list[object] = []

    def unshare() -> None:
        try:
            check(LIBC.unshare(CLONE_NEWNET), "unshare a network namespace")
            fd = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            made.append(fd)
            made.append(inside() if inside else None)
        except BaseException as exc:  # handed to the caller's thread
            made[:] = [exc]

    thread = threading.Thread(target=unshare, name="ductile-netns", daemon=True)
    thread.start()
    thread.join()
    if isinstance(made[0], BaseException):
        if len(made) > 1 and isinstance(made[1], int):
            os.close(made[1])
        raise made[0]
    return NetworkNamespace(made[0]), made[1]  # type: ignore[arg-type,return-value]


def loopback_up() -> None:
    """Bring up `lo` in the calling thread's namespace (which must be a new one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | _IFF_UP, b""))


_home_fd: tuple[int, int] | None = None  # (pid, descriptor of the process's own namespace)
_lock = threading.Lock()
_empty: tuple[int, NetworkNamespace] | None = None


def _home() -> int:
    global _home_fd
    if _home_fd is None or _home_fd[0] != os.getpid():
        _home_fd = (os.getpid(), os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC))
    return _home_fd[1]


def empty_namespace() -> NetworkNamespace:
    """This process's namespace for `network: none`, made on first use (a forked child makes its own)."""
    global _empty
    with _lock:
        if _empty is None or _empty[0] != os.getpid():
            _home()  # opened first, from the process's own namespace
            _empty = (os.getpid(), make_namespace()[0])
        return _empty[1]
