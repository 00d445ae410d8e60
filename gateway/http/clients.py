"""Who is asking: the client's address as the console's login throttle and the API's count of
failed authentications see it.

The connection's address (REMOTE_ADDR) unless it is one of the reverse proxies the operator named
in DUCTILE_TRUSTED_PROXIES (settings.TRUSTED_PROXIES). Only then is X-Forwarded-For read, from
its right, the end the proxies wrote: the first address that is not a trusted proxy is the
client. Anything to its left was sent by the client and could be anything, so it is never used.
"""

from __future__ import annotations

import ipaddress
from functools import cache
from typing import Any

from django.conf import settings

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@cache
def _trusted(names: tuple[str, ...]) -> tuple[Network, ...]:
    # Checked already as the settings were read: a name that is no network stopped the gateway there.
    return tuple(ipaddress.ip_network(name, strict=False) for name in names)


def _is_trusted(address: str, proxies: tuple[Network, ...]) -> bool:
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(parsed in network for network in proxies)


def client_address(request: Any) -> str | None:
    """The address of the client behind `request` (a Django or DRF request)."""
    meta = request.META
    address: str | None = meta.get("REMOTE_ADDR") or None
    proxies = _trusted(tuple(settings.TRUSTED_PROXIES))
    if not proxies or address is None or not _is_trusted(address, proxies):
        return address
    for hop in reversed(meta.get("HTTP_X_FORWARDED_FOR", "").split(",")):
        hop = hop.strip()
        try:
            ipaddress.ip_address(hop)
        except ValueError:
            break  # a hop no proxy of ours wrote: what it says cannot be trusted, nor what is left of it
        address = hop
        if not _is_trusted(hop, proxies):
            break
    return address
