"""What every page of the gateway's own templates can show: which gateway, which version."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from gateway.config.errors import ConfigError
from gateway.runtime import RUNTIME
from gateway.version import gateway_version


def gateway(request: HttpRequest) -> dict[str, Any]:
    try:
        name = RUNTIME.get().config.service.name
    except ConfigError:
        name = ""  # the pages still render; the console says what is wrong where it matters
    return {"gateway_name": name, "gateway_version": gateway_version()}
