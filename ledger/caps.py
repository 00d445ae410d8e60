"""How many jobs of one plugin may run at once, as a claim reads it (`JobQuerySet.claim_next`).
Plain data, importable before Django is set up (the config's registry builds them)."""

from __future__ import annotations

from typing import NamedTuple


class Cap(NamedTuple):
    """Across every node sharing the ledger (None: no cap there), and on the claiming node."""

    cluster: int | None
    node: int
