"""People's accounts for the audit console: a Django user with staff status (to log in to the
admin) and exactly one role group (ledger/roles.py). Never a superuser: what a person may do is
what the role grants. Listed, disabled, enabled and removed here; and their login lockouts
(django-axes' attempt rows, ductile_site/settings.py) read and lifted."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from axes.helpers import get_cool_off
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import OuterRef, QuerySet, Subquery, Sum

from gateway.reports import ts
from ledger.roles import ROLES
from ledger.timestamps import rfc3339


class AccountError(Exception):
    pass


@dataclass(frozen=True)
class Account:
    username: str
    role: str
    created: bool


def save_account(username: str, role: str, password: str, *, update: bool = False, email: str = "") -> Account:
    """Create `username` with `role`, or with `update` give an existing one this role and password.
    The password must pass the configured validators (settings.AUTH_PASSWORD_VALIDATORS)."""
    if role not in ROLES:
        raise AccountError(f"unknown role {role!r} (expected one of: {', '.join(ROLES)})")
    if not username or len(username) > 150:
        raise AccountError("the user name must be 1 to 150 characters")
    user = User.objects.filter(username=username).first()
    if user is not None and not update:
        raise AccountError(f"user {username!r} already exists (add --update to change its role and password)")
    candidate = user or User(username=username, email=email)
    try:
        validate_password(password, candidate)
    except ValidationError as exc:
        raise AccountError("password refused: " + " ".join(exc.messages)) from exc
    groups = {g.name: g for g in Group.objects.filter(name__in=ROLES)}
    if role not in groups:
        raise AccountError(f"the {role!r} group is missing: run `ductile migrate` first")
    with transaction.atomic():
        created = user is None
        user = candidate
        user.is_staff, user.is_superuser, user.is_active = True, False, True
        if email:
            user.email = email
        user.set_password(password)
        user.save()
        user.groups.set([groups[role]])
    return Account(username, role, created)


class NoSuchAccount(AccountError):
    pass


@dataclass(frozen=True)
class Lockout:
    """A username refused from one address until `until` (django-axes' count of its failures)."""

    username: str
    address: str | None
    failures: int
    until: datetime

    def as_dict(self) -> dict[str, Any]:
        return {"address": self.address, "failures": self.failures, "until": rfc3339(self.until)}


def _cool_off() -> timedelta:
    return get_cool_off() or timedelta(0)


def attempts_counted(now: datetime) -> QuerySet[AccessAttempt]:
    """Attempt rows, each with `pair_failures`: the failures of its username and address within the
    cool-off, over every user agent it tried with (axes counts them together); None for a row
    older than the cool-off (axes deletes those at its next login)."""
    recent = AccessAttempt.objects.filter(attempt_time__gte=now - _cool_off())
    pair = recent.filter(username=OuterRef("username"), ip_address=OuterRef("ip_address"))
    total = pair.values("username", "ip_address").annotate(n=Sum("failures_since_start")).values("n")
    return AccessAttempt.objects.annotate(pair_failures=Subquery(total))


def locked_attempts(now: datetime) -> QuerySet[AccessAttempt]:
    """The attempt rows of every username+address locked out now."""
    return attempts_counted(now).filter(
        attempt_time__gte=now - _cool_off(), pair_failures__gte=settings.AXES_FAILURE_LIMIT
    )


def is_locked(attempt: AccessAttempt, now: datetime) -> bool:
    """For a row of `attempts_counted`."""
    recent = attempt.attempt_time >= now - _cool_off()
    return recent and (attempt.pair_failures or 0) >= settings.AXES_FAILURE_LIMIT


def lockouts(now: datetime, username: str | None = None) -> list[Lockout]:
    """Who is locked out now, from where, until when (a lockout lasts the cool-off from the pair's last attempt)."""
    rows = locked_attempts(now)
    if username is not None:
        rows = rows.filter(username=username)
    found: dict[tuple[str, str | None], Lockout] = {}
    for name, address, failures, last in rows.values_list("username", "ip_address", "pair_failures", "attempt_time"):
        until = last + _cool_off()
        known = found.get((name, address))
        if known is None or until > known.until:
            found[(name, address)] = Lockout(name, address, failures, until)
    return sorted(found.values(), key=lambda lockout: (lockout.username, lockout.until))


def unlock(username: str, address: str | None = None) -> int:
    """Lift `username`'s lockout (from `address` only, if given): its failed attempts count 0 again.
    The failed-login records stay. Returns the attempt rows cleared."""
    rows = AccessAttempt.objects.filter(username=username, failures_since_start__gt=0)
    if address is not None:
        rows = rows.filter(ip_address=address)
    return rows.update(failures_since_start=0)


@dataclass(frozen=True)
class AccountRow:
    username: str
    roles: list[str]
    active: bool
    last_login: datetime | None
    lockouts: list[Lockout]

    def as_dict(self) -> dict[str, Any]:
        return {
            "username": self.username,
            "roles": self.roles,
            "active": self.active,
            "last_login": ts(self.last_login),
            "locked_out": bool(self.lockouts),
            "lockouts": [lockout.as_dict() for lockout in self.lockouts],
        }


def list_accounts(now: datetime) -> list[AccountRow]:
    """Every console account, by name: its roles (groups), whether it may log in, when it last
    did, and where it is locked out from."""
    locked: dict[str, list[Lockout]] = {}
    for lockout in lockouts(now):
        locked.setdefault(lockout.username, []).append(lockout)
    return [
        AccountRow(
            user.username,
            sorted(group.name for group in user.groups.all()),
            user.is_active,
            user.last_login,
            locked.get(user.username, []),
        )
        for user in User.objects.order_by("username").prefetch_related("groups")
    ]


def _account(username: str) -> User:
    user = User.objects.filter(username=username).first()
    if user is None:
        raise NoSuchAccount(f"no console account named {username!r} (`ductile admin list-users` lists them)")
    return user


def set_active(username: str, active: bool) -> bool:
    """Let `username` log in, or not. A disabled account's open sessions end too: Django checks
    `is_active` on every request of a session. Returns whether anything changed."""
    user = _account(username)
    if user.is_active == active:
        return False
    user.is_active = active
    user.save(update_fields=["is_active"])
    return True


def remove_account(username: str) -> None:
    """Delete `username`'s account. What it did stays in the console's trail under its name (the
    ledger records `admin:<name>`); the trail's rows themselves go with the account (Django's
    LogEntry belongs to its user)."""
    _account(username).delete()
