from __future__ import annotations

import uuid


def new_id() -> str:
    """Ids are UUID text, as the spec's schema has them (readable in `sqlite3`)."""
    return str(uuid.uuid4())
