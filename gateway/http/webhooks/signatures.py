"""HMAC-SHA256 webhook signatures (spec 000 §10.2): hex over the raw body, GitHub's `sha256=`
prefix accepted ("Webhooks": "GitHub-style `sha256=` prefix is supported")."""

from __future__ import annotations

import hashlib
import hmac
import re

PREFIX = "sha256="
# Exactly one SHA-256 digest in hex, either case: hex names the same bytes in both, and a stricter
# reading would refuse senders that upper-case it for no gain.
_HEX_DIGEST = re.compile(r"[0-9A-Fa-f]{64}")


def signature_matches(secret: str, body: bytes, presented: str | None) -> bool:
    """Whether `presented` is HMAC-SHA256(secret, body). The digests are compared in constant time,
    so the time taken says nothing about how much of a forged signature was right."""
    if not presented:
        return False
    candidate = presented.removeprefix(PREFIX)
    if not _HEX_DIGEST.fullmatch(candidate):
        return False
    expected = hmac.new(secret.encode(), body, hashlib.sha256).digest()
    return hmac.compare_digest(expected, bytes.fromhex(candidate))
