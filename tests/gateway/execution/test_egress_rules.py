"""Which hosts an `egress:` list lets through the proxy (gateway.execution.egress.allows)."""

from __future__ import annotations

import pytest

from gateway.execution.egress import allows

RULES = ("api.example.com", "*.example.org", "10.0.0.1:8443")


@pytest.mark.parametrize(
    ("host", "port", "allowed"),
    [
        ("api.example.com", 443, True),
        ("API.Example.com.", 80, True),
        ("evil-api.example.com", 443, False),
        ("a.example.org", 443, True),
        ("a.b.example.org", 80, True),
        ("example.org", 443, False),  # *.domain is the names under it, not the domain
        ("notexample.org", 443, False),
        ("10.0.0.1", 8443, True),
        ("10.0.0.1", 22, False),
        ("127.0.0.1", 80, False),
    ],
)
def test_an_egress_list_allows_hosts_any_port_host_port_and_names_under_a_wildcard(
    host: str, port: int, allowed: bool
) -> None:
    assert allows(RULES, host, port) is allowed
