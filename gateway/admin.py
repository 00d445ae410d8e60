"""Found by the admin's autodiscovery: registers the ledger's tables with the audit console."""

from __future__ import annotations

from gateway.console import admin as console_admin

__all__ = ["console_admin"]
