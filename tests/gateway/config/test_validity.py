"""A document that passed its schema is not validated again by the next process, and jsonschema
is not imported there (gateway.config.validity); a document that failed, or changed, always is."""

from __future__ import annotations

import math
import stat
from pathlib import Path

import pytest

from gateway.config.model import config_schema
from gateway.config.validity import HEADER, KnownValid, NotCanonical, canonical, memo_path
from gateway.plugins.manifest import manifest_schema
from tests.support.config_dirs import ConfigDir
from tests.support.processes import ductile, imported_modules

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def imports_jsonschema(config: ConfigDir, cache: Path, *args: str) -> tuple[bool, str]:
    """Run a CLI command as a user would; did its process import jsonschema? (and its stdout)"""
    proc = ductile(config, *args, XDG_CACHE_HOME=str(cache), PYTHONPROFILEIMPORTTIME="1")
    assert proc.returncode in (0, 78), proc.stderr[-2000:]
    return "jsonschema" in imported_modules(proc.stderr), proc.stdout + proc.stderr


@pytest.mark.process
def test_the_second_command_on_an_unchanged_config_does_not_import_jsonschema(
    config_dir: ConfigDir, tmp_path: Path
) -> None:
    config_dir.extra["pipelines"] = [{"name": "p", "on": "x.happened", "steps": [{"id": "one", "uses": "echo"}]}]
    config_dir.write()
    cache = tmp_path / "cache"

    first, _ = imports_jsonschema(config_dir, cache, "config", "check")
    second, out = imports_jsonschema(config_dir, cache, "config", "check")

    assert first, "the first load validates with jsonschema"
    assert not second, out
    memo = cache / "ductile" / "known-valid"
    assert stat.S_IMODE(memo.stat().st_mode) == 0o600
    assert stat.S_IMODE(memo.parent.stat().st_mode) == 0o700
    # The config, each plugin's manifest and the pipelines: every document that passed.
    assert len(memo.read_text().splitlines()) >= 1 + 1 + 4 + 1


@pytest.mark.process
def test_a_config_edited_after_it_passed_is_validated_again_and_its_problem_named(
    config_dir: ConfigDir, tmp_path: Path
) -> None:
    config_dir.write()
    cache = tmp_path / "cache"
    imports_jsonschema(config_dir, cache, "config", "check")

    config_dir.service["max_workers"] = "lots"
    config_dir.write()
    imported, out = imports_jsonschema(config_dir, cache, "config", "check")
    again, out_again = imports_jsonschema(config_dir, cache, "config", "check")

    assert imported and again, "a document that failed is never remembered"
    for text in (out, out_again):
        assert "config.yaml" in text and "service.max_workers" in text, text


def test_a_document_that_failed_is_never_remembered(tmp_path: Path) -> None:
    path = tmp_path / "known-valid"
    memo = KnownValid(path)
    assert memo.errors(SCHEMA, {"n": 1}) == []
    assert [e.message for e in memo.errors(SCHEMA, {"n": "one"})] == ["'one' is not of type 'integer'"]
    memo.save()

    later = KnownValid(path)
    assert [e.message for e in later.errors(SCHEMA, {"n": "one"})] == ["'one' is not of type 'integer'"]
    assert len(path.read_text().splitlines()) == 2  # the header and the one document that passed


def test_the_same_document_under_another_schema_is_judged_by_that_schema(tmp_path: Path) -> None:
    memo = KnownValid(tmp_path / "known-valid")
    assert memo.errors(SCHEMA, {"n": 1}) == []
    stricter = {**SCHEMA, "properties": {"n": {"type": "integer", "minimum": 2}}}
    assert [e.message for e in memo.errors(stricter, {"n": 1})] == ["1 is less than the minimum of 2"]


@pytest.mark.parametrize(
    "content",
    [b"", b"garbage\n", b"\xff\xfe\x00", f"{HEADER}\nnot-a-digest\n".encode(), b"ductile known-valid 99\n" + b"a" * 64],
)
def test_a_damaged_memo_is_an_empty_one(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "known-valid"
    path.write_bytes(content)
    memo = KnownValid(path)
    assert [e.message for e in memo.errors(SCHEMA, {})] == ["'n' is a required property"]
    assert memo.errors(SCHEMA, {"n": 3}) == []
    memo.save()
    assert path.read_text().splitlines()[0] == HEADER


def test_a_memo_that_cannot_be_written_is_skipped(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    memo = KnownValid(blocker / "ductile" / "known-valid")  # a directory under a file
    assert memo.errors(SCHEMA, {"n": 1}) == []
    memo.save()  # no error: it is a cache
    assert memo.errors(SCHEMA, {"n": 1}) == []


@pytest.mark.parametrize(
    "document",
    [{1: "x"}, {"a": (1, 2)}, {"a": math.nan}, {"a": math.inf}, {"a": b"bytes"}, {"a": {1, 2}}],
    ids=["int key", "tuple", "nan", "inf", "bytes", "set"],
)
def test_a_value_without_one_json_spelling_is_not_remembered(tmp_path: Path, document: object) -> None:
    """json.dumps spells {1: x} as {"1": x} and a tuple as a list; the schema does not."""
    with pytest.raises(NotCanonical):
        canonical(document)
    path = tmp_path / "known-valid"
    memo = KnownValid(path)
    memo.errors({"type": "object"}, document)
    memo.save()
    assert not path.exists()


def test_the_gateways_schemas_have_a_canonical_spelling() -> None:
    """Else no config or manifest would ever be remembered."""
    assert canonical(config_schema()) and canonical(manifest_schema())


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"XDG_CACHE_HOME": "/c", "HOME": "/h"}, "/c/ductile/known-valid"),
        ({"XDG_CACHE_HOME": "relative", "HOME": "/h"}, "/h/.cache/ductile/known-valid"),
        ({"XDG_CACHE_HOME": "", "HOME": "/h"}, "/h/.cache/ductile/known-valid"),
        ({"HOME": "relative"}, None),
        ({}, None),
    ],
)
def test_the_memo_lives_in_the_users_cache_directory(environ: dict[str, str], expected: str | None) -> None:
    path = memo_path(environ)
    assert (str(path) if path else None) == expected
