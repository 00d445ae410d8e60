"""The audit console's two roles, as Django groups made by migration 0006 (ARCHITECTURE, "Human
surfaces"): an auditor may view every ledger table and act on nothing; an operator may also take
the console's explicit actions."""

from __future__ import annotations

AUDITOR = "auditor"
OPERATOR = "operator"
ROLES = (AUDITOR, OPERATOR)
# Apps whose every table both roles may read: the ledger and the housekeeping queue.
VIEWABLE_APPS = ("ledger", "django_q")
