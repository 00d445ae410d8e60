"""Bearer-token authentication and scope permissions for the DRF API (spec 000 §9.4).

A missing or malformed `Authorization` header, or an unknown token, is 401; a valid token
without the scope the view asks for is 403. `?token=` is accepted on `/events` only (browsers'
EventSource cannot send headers). Tokens are never logged. Each 401 is counted per client address
and logged at a bounded rate (gateway/http/refusals.py); a valid token costs nothing more.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from gateway.config.tokens import RESULT_FIELDS, RESULTS, ApiToken
from gateway.http.clients import client_address
from gateway.http.refusals import API_AUTHENTICATION, Refusals
from gateway.runtime import RUNTIME

REFUSALS = Refusals(API_AUTHENTICATION)


def refused(request: Request, reason: str) -> str:
    """Count a failed authentication of `request`; returns `reason`, the 401's words."""
    REFUSALS.record(client_address(request), reason, request.path)
    return reason


class TokenUser:
    """What `request.user` is for an authenticated call: the token's name and scopes."""

    is_authenticated = True
    is_anonymous = False

    def __init__(self, token: ApiToken):
        self.token = token
        self.username = token.name

    def __str__(self) -> str:
        return self.token.name


class BearerAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[TokenUser, ApiToken] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        presented = None
        if header:
            kind, _, value = header.partition(" ")
            if kind.lower() != "bearer" or not value.strip():
                raise exceptions.AuthenticationFailed(
                    refused(request, "malformed Authorization header: use `Bearer <token>`")
                )
            presented = value.strip()
        elif request._request.resolver_match and request._request.resolver_match.url_name == "events":
            presented = request.query_params.get("token") or None
        if presented is None:
            return None
        token = RUNTIME.get().tokens.authenticate(presented)
        if token is None:
            raise exceptions.AuthenticationFailed(refused(request, "invalid token"))
        return TokenUser(token), token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="ductile"'  # makes DRF answer 401, not 403, when the token is missing


class Scoped(BasePermission):
    """The view's `scopes(request)` lists alternatives, any one of which is enough; None means open."""

    def has_permission(self, request: Request, view: Any) -> bool:
        needed: Sequence[str] | None = view.scopes(request)
        if needed is None:
            return True
        if not isinstance(request.auth, ApiToken):
            raise exceptions.NotAuthenticated(refused(request, "missing bearer token"))
        if not request.auth.allows(*needed):
            raise exceptions.PermissionDenied(f"token lacks scope: needs one of {', '.join(needed)}")
        return True


def sees_results(request: Request) -> bool:
    return isinstance(request.auth, ApiToken) and request.auth.allows(RESULTS)


def shaped(request: Request, rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """`rows` as the caller's token may see them: without `RESULT_FIELDS` unless it sees results."""
    if sees_results(request):
        return list(rows)
    return [{k: v for k, v in row.items() if k not in RESULT_FIELDS} for row in rows]
