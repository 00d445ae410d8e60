"""The one scrubbing rule every surface applies (gateway/config/redaction.py): which values of a
config are secrets, and how a text or a JSON value is scrubbed of them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.config.redaction import LONG_TEXT, REDACTED, Scrubber, secret_values

ADMIN = "tok-admin-5f0c9a7e31"
RELAY = "relay-hmac-8e1d2f3a4b5c"


def test_the_secrets_are_the_values_not_the_names_and_scopes_beside_them():
    """A token's name and scopes, a `secret_ref`, a key id and a dedupe key template sit under
    secret-like keys but hold no secret: scrubbed from every text, they cut the messages that
    name them (`needs jobs:ro`, `secret_ref 'relay-lab'`)."""
    document = {
        "api": {"auth": {"tokens": [{"name": "admin-token", "token": ADMIN, "scopes": ["jobs:ro", "plugin:rw"]}]}},
        "tokens": [
            {"name": "relay-lab", "key": RELAY},
            {"name": "ci-reader", "key": "KEY-ci-123", "scopes_file": "ci.json", "scopes_hash": "blake3:abcdef"},
            # What `config token create --description` writes beside the key (issue 35 audit, N3).
            {"name": "ci3", "key": "KEY-ci3-456", "description": "nightly backups", "created_at": "2026-11-28T12:00Z"},
        ],
        "plugins": {"mailer": {"config": {"api_key": "sk-live-0a1b2c", "credentials": {"user": "svc-mailer"}}}},
        "instances": [{"name": "lab", "secret_ref": "relay-lab", "key_id": "k2024-01"}],
        "pipelines": [{"name": "p", "steps": [{"id": "s", "relay": {"to": "lab", "dedupe_key": "{payload.order}"}}]}],
    }
    # Under `credentials:` even the user may be the secret: the whole subtree goes.
    assert secret_values(document) == {ADMIN, RELAY, "KEY-ci-123", "KEY-ci3-456", "sk-live-0a1b2c", "svc-mailer"}


def test_each_secret_goes_whole_the_longest_first_whatever_it_is_made_of():
    scrubber = Scrubber([ADMIN, f"{ADMIN}-v2", "a.b*c(d[e]|f$", "x" * 5000])
    text = f"<{ADMIN}-v2> <{ADMIN}> <a.b*c(d[e]|f$> <{'x' * 5001}>"
    assert scrubber.text(text) == f"<{REDACTED}> <{REDACTED}> <{REDACTED}> <{REDACTED}x>"
    long = "plain words. " * (LONG_TEXT // 10) + ADMIN
    assert scrubber.text(long) == long.replace(ADMIN, REDACTED)


def test_json_values_and_keys_are_scrubbed_and_clean_data_is_returned_as_it_is():
    scrubber = Scrubber([ADMIN, "héllo-wörld", 'quote"d-secret'])
    value = {"said": [f"a {ADMIN} b", 12, None, {ADMIN: "héllo-wörld!"}], "q": 'x quote"d-secret'}
    assert scrubber.json(value) == {
        "said": [f"a {REDACTED} b", 12, None, {REDACTED: f"{REDACTED}!"}],
        "q": f"x {REDACTED}",
    }
    clean = {"said": ["nothing", 1], "more": {"deep": "still nothing"}}
    assert scrubber.json(clean) is clean


def test_a_job_hides_what_it_carried_under_secret_like_keys():
    scrubber = Scrubber([ADMIN]).knowing({"auth_token": "payload-tok-77", "note": "kept"}, None, {"user": "ada"})
    assert scrubber.text(f"{ADMIN} payload-tok-77 kept ada") == f"{REDACTED} {REDACTED} kept ada"
    same = Scrubber([ADMIN])
    assert same.knowing({"note": "no secret-like key"}) is same


# Secrets that cannot overlap one another: each starts with the only `#` it has, and no filler has one.
SECRETS = st.lists(st.text("abc-", min_size=5, max_size=12).map(lambda s: "#" + s), min_size=1, max_size=6)
FILLERS = st.lists(st.text("abc- \n", max_size=40), min_size=1, max_size=8)


def longest_at_each_hash(text: str, secrets: list[str]) -> str:
    """The expected result, the slow way: at each `#`, the longest secret that starts there."""
    out, i = [], 0
    while i < len(text):
        found = max((s for s in secrets if text.startswith(s, i)), key=len, default=None)
        out.append(REDACTED if found else text[i])
        i += len(found) if found else 1
    return "".join(out)


@given(SECRETS, FILLERS, st.integers(0, 3))
def test_no_secret_is_left_in_any_text_short_or_long(secrets, fillers, repeat):
    """Short texts go to the pattern at once, long ones (from LONG_TEXT) after a search for each
    secret: either way no secret is left, and a text without one comes back as it was."""
    text = "".join(f"{filler}{secrets[i % len(secrets)]}" for i, filler in enumerate(fillers)) * (1 + repeat * 20)
    scrubber = Scrubber(secrets)
    scrubbed = scrubber.text(text)
    assert not any(secret in scrubbed for secret in secrets)
    assert scrubbed == longest_at_each_hash(text, secrets)
    clean = text.replace("#", "")
    assert scrubber.text(clean) is clean


def test_a_stored_response_is_looked_at_by_the_letters_and_digits_no_encoder_escapes():
    """Go writes `&` as `\\u0026`, Python `é` as `\\u00e9`: the core of letters and digits is there
    whatever the encoder, so a response that may hold a secret is never passed over."""
    scrubber = Scrubber(["tok&abc123-é"])
    go, python = '{"result": "tok\\u0026abc123-\\u00e9"}', '{"result": "tok&abc123-\\u00e9"}'
    assert scrubber.may_be_in(go) and scrubber.may_be_in(python)
    assert not scrubber.may_be_in('{"result": "nothing of it"}')
    assert Scrubber(["!@#$%^&*"]).may_be_in("{}")  # no core to look for: always looked at
    assert not Scrubber().may_be_in(go)
