"""The audit console: the Django admin as the place where a person audits and operates the gateway
(ARCHITECTURE, "Human surfaces"). Importing this package registers every ledger table,
and django-axes' tables of the console's logins."""

from __future__ import annotations

from gateway.console.admin import breakers, jobs, logins, records

__all__ = ["breakers", "jobs", "logins", "records"]
