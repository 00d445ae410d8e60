"""Ledger ids: UUID text, as the spec's schema has them."""

from __future__ import annotations

import uuid

from ledger.ids import new_id


def test_an_id_is_the_text_of_a_random_uuid_and_ids_do_not_repeat():
    ids = [new_id() for _ in range(5000)]
    for text in ids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
    assert len(set(ids)) == len(ids)
    # All four variant digits occur: the variant bits are set, the rest stays random.
    assert {text[19] for text in ids} == set("89ab")
