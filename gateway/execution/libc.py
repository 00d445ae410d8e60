"""The C library, for the system calls Python's `os` lacks (setns, unshare, the raw per-thread
credential calls of the sandbox): one handle that keeps errno, and one way a failed call becomes
an OSError that names what was tried."""

from __future__ import annotations

import ctypes
import os

LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.syscall.restype = ctypes.c_long


def check(result: int, what: str) -> None:
    """A call's result: 0, or an OSError with its errno and `what`."""
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
