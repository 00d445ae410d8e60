"""People's accounts for the audit console: a Django user with staff status (to log in to the
admin) and exactly one role group (ledger/roles.py). Never a superuser: what a person may do is
what the role grants."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import Group, User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import transaction

from ledger.roles import ROLES


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
