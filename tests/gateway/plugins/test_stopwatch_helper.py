"""plugins/_lib/_stopwatch.py, the sub-span helper for Python plugin authors (spec 000,
"Stopwatch"): the shape it emits. That the gateway records it in job_stopwatch is shown with the
fetch plugin, which uses it (tests/gateway/plugins/test_fetch.py)."""

from __future__ import annotations

import importlib.util
import sys
import time
from types import ModuleType

import pytest

from gateway.plugins.discovery import discover_plugins
from tests.support.checkout import REPO

LIB = REPO / "plugins" / "_lib"


@pytest.fixture(scope="module")
def stopwatch() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_stopwatch", LIB / "_stopwatch.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Imported as a plugin imports it: by its own name, leaving no bytecode in the plugin root.
    sys.modules["_stopwatch"], writes = module, sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["_stopwatch"]
        sys.dont_write_bytecode = writes
    return module


def test_a_timed_block_is_one_span_with_integer_nanoseconds_and_its_annotations(stopwatch):
    spans = stopwatch.Spans()
    with spans.time("demo.read", status="ok") as span:
        time.sleep(0.001)
        span.annotate(bytes=4096)
    spans.add("demo.rows", dur_ns=12_345, count=3)
    (read, rows) = spans.to_response_key()
    assert read["name"] == "demo.read" and type(read["dur_ns"]) is int and read["dur_ns"] >= 1_000_000
    assert (read["status"], read["bytes"]) == ("ok", 4096)
    assert rows == {"name": "demo.rows", "dur_ns": 12345, "count": 3}
    assert stopwatch.SUBS_RESPONSE_KEY == "ductile_stopwatch_subs"


def test_a_block_that_raises_is_recorded_as_err_unless_it_said_otherwise(stopwatch):
    spans = stopwatch.Spans()
    with pytest.raises(RuntimeError), spans.time("demo.fails"):
        raise RuntimeError("boom")
    with pytest.raises(TimeoutError), spans.time("demo.slow") as span:
        span.annotate(status="timeout")
        raise TimeoutError
    assert [(s["name"], s["status"]) for s in spans.to_response_key()] == [
        ("demo.fails", "err"),
        ("demo.slow", "timeout"),
    ]


def test_the_list_stops_at_the_gateways_cap_keeping_the_first(stopwatch):
    spans = stopwatch.Spans()
    for i in range(40):
        spans.add(f"demo.s{i}", dur_ns=i)
    assert len(spans) == 40
    assert [s["name"] for s in spans.to_response_key()] == [f"demo.s{i}" for i in range(32)]
    # A manifest's stopwatch.max_subs raises the gateway's cap; the plugin passes the same number.
    raised = stopwatch.Spans(max_subs=64)
    for i in range(40):
        raised.add(f"demo.s{i}", dur_ns=i)
    assert len(raised.to_response_key()) == 40
    with pytest.raises(TypeError, match="non-empty string"):
        raised.add("", dur_ns=1)


def test_the_helper_directory_is_not_a_plugin():
    found = discover_plugins((REPO / "plugins",))
    assert "echo" in found.manifests and not found.invalid
    assert not any("_lib" in str(problem) for problem in found.warnings)
    assert all(manifest.directory.name != "_lib" for manifest in found.manifests.values())
