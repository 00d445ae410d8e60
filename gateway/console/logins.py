"""The console's door: each failed login a JSON log line, and a locked-out person told why and for
how long, on the login page itself. django-axes counts and locks (the AXES_ settings); this adds what
a person and an operator read."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from axes.conf import settings
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username, get_cool_off, get_failure_limit
from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import REDIRECT_FIELD_NAME
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from gateway.logs import logger

log = logger("console")


def spoken(delta: timedelta) -> str:
    """15 minutes, 1 hour, 90 seconds: a cool-off as a person says it."""
    seconds = int(delta.total_seconds())
    for unit, size in (("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


class LoggingHandler(AxesDatabaseHandler):
    """axes' database handler (the failed-login rows the console lists, the lockout), and one log
    line per failure: who was tried, from where, how many failures the pair has, and whether it is
    now locked out."""

    def user_login_failed(self, sender: Any, credentials: dict[str, Any], request: Any = None, **kwargs: Any) -> None:
        super().user_login_failed(sender, credentials, request, **kwargs)
        if request is None:
            return  # axes logged its own error: it cannot count without a request
        username = get_client_username(request, credentials)
        address = request.axes_ip_address
        failures = request.axes_failures_since_start or 0
        limit = get_failure_limit(request, credentials)
        locked = bool(request.axes_locked_out)
        if locked:
            outcome = f"locked out for {spoken(settings.AXES_COOLOFF_TIME)} after its last attempt"
        else:
            outcome = f"{limit - failures} more before a lockout"
        log.warning(
            "failed console login for %r from %s: %d failed within %s, %s",
            username,
            address,
            failures,
            spoken(settings.AXES_COOLOFF_TIME),
            outcome,
            extra={"username": username, "client_ip": address, "failures": failures, "locked_out": locked},
        )


def locked_out(request: HttpRequest, original_response: HttpResponse | None, credentials: Any) -> HttpResponse:
    """The login page again, with why the login was refused and until when (429). The password
    was not checked: a locked-out pair is refused before it is (axes' backend comes first)."""
    username = get_client_username(request, credentials) or ""
    cool_off = get_cool_off(request) or timedelta(0)
    attempted = getattr(request, "axes_attempt_time", None) or timezone.now()
    until = attempted + cool_off
    message = (
        f"Too many failed logins for “{username}” from your address: logging in as {username} from here "
        f"is refused for {spoken(cool_off)}, until {until:%H:%M:%S} UTC. Each further attempt starts the "
        f"{spoken(cool_off)} again. An operator can lift it sooner (`ductile admin unlock {username}`)."
    )
    context = {
        **admin.site.each_context(request),
        "title": "Log in",
        "subtitle": None,
        "app_path": request.get_full_path(),
        "form": AdminAuthenticationForm(request, initial={"username": username}),
        REDIRECT_FIELD_NAME: request.POST.get(REDIRECT_FIELD_NAME) or reverse("admin:index"),
        "lockout": message,
    }
    # Rendered here: a middleware's response is not rendered for it, as a view's TemplateResponse is.
    return render(request, "admin/login.html", context, status=settings.AXES_HTTP_RESPONSE_CODE)
