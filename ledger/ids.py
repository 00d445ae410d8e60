from __future__ import annotations

import os

_VARIANT = "89ab"  # RFC 9562: the top two bits of the 17th hex digit are 10


def new_id() -> str:
    """Ids are UUID text, as the spec's schema has them (readable in `sqlite3`): random UUIDs
    (version 4), written out from 16 random bytes directly. `str(uuid.uuid4())` builds and
    validates a UUID object on the way, ~3 µs against ~1 µs, and a job takes a few ids."""
    text = os.urandom(16).hex()
    return f"{text[:8]}-{text[8:12]}-4{text[13:16]}-{_VARIANT[int(text[16], 16) & 3]}{text[17:20]}-{text[20:32]}"
