"""The gateway's version, as installed (or the source tree's when run from a checkout)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def gateway_version() -> str:
    try:
        return version("ductile-django")
    except PackageNotFoundError:
        return "0.1.0+source"
