"""The `if:` predicate engine (DSL reference §3.6, §2.1, §10): every operator, strict typing,
missing paths, nested paths and list indexes, all/any/not, and every load-time refusal naming the
offending node. Pure: no database, no processes."""

from __future__ import annotations

import pytest

from pipelines.predicates import MAX_DEPTH, MAX_NODES, InvalidCondition, evaluate, find_root, validate

SCOPE = {
    "payload": {
        "kind": "video",
        "title": "Hello World",
        "n": 5,
        "one": 1,
        "zero": 0,
        "ratio": 2.5,
        "text_one": "1",
        "text_five": "5",
        "flag": True,
        "off": False,
        "nothing": None,
        "tags": ["a", "b"],
        "items": [{"name": "first"}, {"name": "second", "size": 7}],
        "nested": {"deep": {"x": 1}},
        "obj": {"a": 1},
    },
    "context": {"trace": {"id": "t-1"}, "origin": {"user": "ada"}},
    "config": {"mode": "fast", "limit": 10},
}


def atom(path, op, *value):
    node = {"path": path, "op": op}
    if value:
        node["value"] = value[0]
    return node


ATOMIC_CASES = [
    # exists: a present key (even null) exists; an absent one does not
    ("payload.kind", "exists", (), True),
    ("payload.nothing", "exists", (), True),
    ("payload.absent", "exists", (), False),
    ("payload.nested.deep.x", "exists", (), True),
    ("payload.nested.deep.y", "exists", (), False),
    ("payload.items.1.size", "exists", (), True),
    ("payload.items.0.size", "exists", (), False),
    ("payload.items.5", "exists", (), False),
    ("payload.kind.0", "exists", (), False),  # a string is not indexable
    ("payload.tags.-1", "exists", (), False),  # no negative indexes
    ("payload.tags.²", "exists", (), False),  # list indexes are ASCII digits (str.isdigit() says "²" is one)
    ("payload.tags.\u0661", "exists", (), False),  # ARABIC-INDIC DIGIT ONE: int() would read it as 1
    ("payload.n.x", "exists", (), False),
    ("context.trace.id", "exists", (), True),
    ("context.absent", "exists", (), False),
    ("config.mode", "exists", (), True),
    # eq: strict, no coercion, exact strings
    ("payload.kind", "eq", ("video",), True),
    ("payload.kind", "eq", ("VIDEO",), False),
    ("payload.kind", "eq", ("vid",), False),
    ("payload.n", "eq", (5,), True),
    ("payload.n", "eq", (5.0,), True),
    ("payload.ratio", "eq", (2.5,), True),
    ("payload.n", "eq", ("5",), False),
    ("payload.text_one", "eq", (1,), False),
    ("payload.text_one", "eq", ("1",), True),
    ("payload.flag", "eq", (True,), True),
    ("payload.flag", "eq", (1,), False),
    ("payload.one", "eq", (True,), False),
    ("payload.zero", "eq", (False,), False),
    ("payload.off", "eq", (0,), False),
    ("payload.nothing", "eq", (None,), True),
    ("payload.nothing", "eq", ("",), False),
    ("payload.tags", "eq", (["a", "b"],), True),
    ("payload.tags", "eq", (["b", "a"],), False),
    ("payload.obj", "eq", ({"a": 1},), True),
    ("payload.obj", "eq", ({"a": True},), False),
    ("payload.obj", "eq", ({"a": 1, "b": 2},), False),
    ("payload.items.0.name", "eq", ("first",), True),
    ("payload.items.1.name", "eq", ("first",), False),
    ("payload.tags.²", "eq", (None,), True),
    ("context.origin.user", "eq", ("ada",), True),
    ("config.limit", "eq", (10,), True),
    # neq is the exact negation of eq
    ("payload.kind", "neq", ("audio",), True),
    ("payload.kind", "neq", ("video",), False),
    ("payload.text_one", "neq", (1,), True),
    ("payload.flag", "neq", (1,), True),
    ("payload.n", "neq", (5.0,), False),
    # in: membership under the same strict equality
    ("payload.kind", "in", (["audio", "video"],), True),
    ("payload.kind", "in", (["audio"],), False),
    ("payload.kind", "in", ([],), False),
    ("payload.n", "in", ([1, 5],), True),
    ("payload.n", "in", (["5"],), False),
    ("payload.flag", "in", ([1, "true"],), False),
    ("payload.one", "in", ([True],), False),
    ("payload.tags", "in", ([["a", "b"]],), True),
    # numeric operators: numbers only (bools are not numbers, numeric strings are not numbers)
    ("payload.n", "gt", (4,), True),
    ("payload.n", "gt", (5,), False),
    ("payload.n", "gte", (5,), True),
    ("payload.n", "gte", (5.5,), False),
    ("payload.n", "lt", (6,), True),
    ("payload.n", "lt", (5,), False),
    ("payload.n", "lte", (5,), True),
    ("payload.n", "lte", (4.99,), False),
    ("payload.ratio", "gt", (2,), True),
    ("payload.ratio", "lte", (2.5,), True),
    ("payload.zero", "lt", (1,), True),
    ("payload.text_five", "gt", (1,), False),
    ("payload.text_five", "lt", (100,), False),
    ("payload.flag", "gt", (0,), False),
    ("payload.off", "lt", (1,), False),
    ("payload.tags", "gt", (0,), False),
    ("payload.obj", "gte", (0,), False),
    ("payload.nothing", "lt", (1,), False),
    # string operators: case-insensitive, strings only
    ("payload.title", "contains", ("world",), True),
    ("payload.title", "contains", ("O W",), True),
    ("payload.title", "contains", ("planet",), False),
    ("payload.title", "contains", ("",), True),
    ("payload.title", "startswith", ("hello",), True),
    ("payload.title", "startswith", ("HELLO W",), True),
    ("payload.title", "startswith", ("world",), False),
    ("payload.title", "endswith", ("WORLD",), True),
    ("payload.title", "endswith", ("hello",), False),
    ("payload.text_five", "contains", ("5",), True),
    ("payload.n", "contains", ("5",), False),
    ("payload.n", "startswith", ("5",), False),
    ("payload.one", "endswith", ("1",), False),
    ("payload.flag", "contains", ("true",), False),
    ("payload.tags", "contains", ("a",), False),
    ("payload.obj", "startswith", ("a",), False),
    ("payload.nothing", "contains", ("",), False),
    # regex: the whole string must match; case-sensitive unless (?i)
    ("payload.kind", "regex", ("vid.*",), True),
    ("payload.kind", "regex", ("video",), True),
    ("payload.kind", "regex", ("vid",), False),
    ("payload.kind", "regex", ("ide",), False),
    ("payload.kind", "regex", ("vid|xyz",), False),
    ("payload.kind", "regex", ("audio|video",), True),
    ("payload.kind", "regex", ("VIDEO",), False),
    ("payload.kind", "regex", ("(?i)VIDEO",), True),
    ("payload.title", "regex", (r"Hello\s+\w+",), True),
    ("payload.text_five", "regex", (r"\d",), True),
    ("payload.n", "regex", (r"\d",), False),
    ("payload.flag", "regex", (".*",), False),
    ("payload.nothing", "regex", (".*",), False),
]


@pytest.mark.parametrize(("path", "op", "value", "expected"), ATOMIC_CASES)
def test_atomic_operators(path, op, value, expected):
    condition = atom(path, op, *value)
    validate(condition)
    assert evaluate(condition, SCOPE) is expected


# A missing path is absent for `exists` and compares as null for everything else (§3.6).
MISSING_CASES = [
    ("exists", (), False),
    ("eq", (None,), True),
    ("eq", ("x",), False),
    ("eq", (0,), False),
    ("eq", (False,), False),
    ("neq", ("x",), True),
    ("neq", (None,), False),
    ("in", ([None],), True),
    ("in", (["x", 0, False],), False),
    ("gt", (0,), False),
    ("gte", (0,), False),
    ("lt", (100,), False),
    ("lte", (100,), False),
    ("contains", ("",), False),
    ("startswith", ("",), False),
    ("endswith", ("",), False),
    ("regex", (".*",), False),
]


@pytest.mark.parametrize(("op", "value", "expected"), MISSING_CASES)
@pytest.mark.parametrize("path", ["payload.absent", "payload.nested.deep.absent", "payload.items.9.name", "context.x"])
def test_missing_paths(path, op, value, expected):
    condition = atom(path, op, *value)
    validate(condition)
    assert evaluate(condition, SCOPE) is expected


def test_an_absent_root_is_missing_like_any_other_path():
    """A pipeline-level `if:` with no upstream context tests context.* against nothing (§2.1)."""
    scope = {"payload": {"x": 1}}
    assert evaluate(atom("context.trace", "exists"), scope) is False
    assert evaluate(atom("context.trace", "eq", None), scope) is True
    assert evaluate(atom("context.trace", "eq", "t-1"), scope) is False
    assert evaluate(atom("config.mode", "neq", "fast"), scope) is True


def test_a_path_may_name_a_whole_root():
    condition = atom("payload", "exists")
    validate(condition)
    assert evaluate(condition, SCOPE) is True
    assert evaluate(atom("context", "exists"), {"payload": {}}) is False


TRUE = atom("payload.n", "eq", 5)
FALSE = atom("payload.n", "eq", 6)

COMPOSITE_CASES = [
    ({"all": [TRUE]}, True),
    ({"all": [TRUE, TRUE]}, True),
    ({"all": [TRUE, FALSE]}, False),
    ({"all": [FALSE, TRUE]}, False),
    ({"any": [FALSE, TRUE]}, True),
    ({"any": [FALSE, FALSE]}, False),
    ({"any": [TRUE]}, True),
    ({"not": TRUE}, False),
    ({"not": FALSE}, True),
    ({"not": {"not": TRUE}}, True),
    ({"not": atom("payload.absent", "exists")}, True),
    ({"all": [{"any": [FALSE, TRUE]}, {"not": FALSE}]}, True),
    ({"all": [{"any": [FALSE, FALSE]}, {"not": FALSE}]}, False),
    ({"any": [{"all": [TRUE, FALSE]}, {"not": {"any": [FALSE]}}]}, True),
    (
        {
            "all": [
                atom("payload.kind", "eq", "video"),
                atom("context.trace.id", "startswith", "T-"),
                atom("config.limit", "gte", 10),
                {"not": atom("payload.tags", "eq", [])},
            ]
        },
        True,
    ),
]


@pytest.mark.parametrize(("condition", "expected"), COMPOSITE_CASES)
def test_all_any_not_composition(condition, expected):
    validate(condition)
    assert evaluate(condition, SCOPE) is expected


def test_the_spec_examples_evaluate_as_documented():
    """DSL reference §3.6 (long-video-handler) and §2 (notify-on-real-failure)."""
    long_video = {
        "all": [
            {"path": "payload.kind", "op": "eq", "value": "video"},
            {"path": "payload.duration_sec", "op": "gte", "value": 30},
        ]
    }
    validate(long_video)
    assert evaluate(long_video, {"payload": {"kind": "video", "duration_sec": 45}}) is True
    assert evaluate(long_video, {"payload": {"kind": "video", "duration_sec": 10}}) is False
    assert evaluate(long_video, {"payload": {"kind": "video", "duration_sec": "45"}}) is False
    noisy = {"not": {"path": "payload.plugin", "op": "in", "value": ["check_youtube", "jina-reader"]}}
    validate(noisy)
    assert evaluate(noisy, {"payload": {"plugin": "jina-reader"}}) is False
    assert evaluate(noisy, {"payload": {"plugin": "git-sync"}}) is True


# Every refusal: (condition, node the error names, words the message contains).
REFUSALS = [
    (atom("payload.x", "like", 1), "if.op", "unknown operator 'like'"),
    (atom("payload.x", "EQ", 1), "if.op", "unknown operator"),
    ({"path": "payload.x"}, "if.op", "unknown operator None"),
    ({"path": "payload.x", "op": ["eq"], "value": 1}, "if.op", "unknown operator"),
    (atom("body.x", "exists"), "if.path", "'body.x' is not a path under payload.* or context.* or config.*"),
    (atom("payloads.x", "exists"), "if.path", "not a path under"),
    (atom("payload..x", "exists"), "if.path", "not a path under"),
    (atom("payload.", "exists"), "if.path", "not a path under"),
    (atom("", "exists"), "if.path", "not a path under"),
    ({"path": 5, "op": "exists"}, "if.path", "not a path under"),
    (atom("payload.n", "gt", "5"), "if.value", "gt needs a number"),
    (atom("payload.n", "gte", True), "if.value", "gte needs a number"),
    (atom("payload.n", "lt", None), "if.value", "lt needs a number"),
    (atom("payload.n", "lte", [1]), "if.value", "lte needs a number"),
    (atom("payload.s", "contains", 5), "if.value", "contains needs a string"),
    (atom("payload.s", "startswith", None), "if.value", "startswith needs a string"),
    (atom("payload.s", "endswith", ["x"]), "if.value", "endswith needs a string"),
    (atom("payload.s", "regex", 1), "if.value", "regex needs a string"),
    (atom("payload.s", "in", "abc"), "if.value", "in needs a list"),
    (atom("payload.s", "in", {"a": 1}), "if.value", "in needs a list"),
    ({"path": "payload.s", "op": "eq"}, "if.value", "eq needs a value"),
    ({"path": "payload.s", "op": "in"}, "if.value", "in needs a value"),
    ({"path": "payload.s", "op": "gt"}, "if.value", "gt needs a value"),
    (atom("payload.s", "exists", True), "if.value", "exists takes no value"),
    (atom("payload.s", "exists", None), "if.value", "exists takes no value"),
    (atom("payload.s", "regex", "("), "if.value", "invalid regex"),
    (atom("payload.s", "regex", "[a-"), "if.value", "invalid regex"),
    ({"path": "payload.x", "op": "exists", "all": [TRUE]}, "if", "exactly one of"),
    ({"all": [TRUE], "any": [TRUE]}, "if", "exactly one of"),
    ({"any": [TRUE], "not": TRUE}, "if", "exactly one of"),
    ({"path": "payload.x", "op": "exists", "not": TRUE}, "if", "exactly one of"),
    ({}, "if", "exactly one of"),
    ({"op": "eq", "value": 1}, "if", "exactly one of"),
    ({"path": "payload.x", "op": "exists", "extra": 1}, "if", "unexpected keys extra"),
    ({"not": TRUE, "op": "eq"}, "if", "unexpected keys op"),
    ({"all": [TRUE], "value": 1}, "if", "unexpected keys value"),
    ({"all": []}, "if.all", "non-empty list"),
    ({"any": []}, "if.any", "non-empty list"),
    ({"all": TRUE}, "if.all", "non-empty list"),
    ({"any": None}, "if.any", "non-empty list"),
    (None, "if", "must be a mapping"),
    ("payload.x == 1", "if", "must be a mapping"),
    ({"all": ["payload.x"]}, "if.all[0]", "must be a mapping"),
    ({"not": [TRUE]}, "if.not", "must be a mapping"),
    ({"all": [TRUE, atom("payload.x", "nope", 1)]}, "if.all[1].op", "unknown operator 'nope'"),
    ({"any": [TRUE, {"not": atom("payload.x", "gt", "x")}]}, "if.any[1].not.value", "gt needs a number"),
    ({"all": [TRUE, {"any": [TRUE, atom("nope.x", "exists")]}]}, "if.all[1].any[1].path", "not a path under"),
    ({"not": {"all": [TRUE, {"any": []}]}}, "if.not.all[1].any", "non-empty list"),
]


@pytest.mark.parametrize(("condition", "where", "words"), REFUSALS)
def test_invalid_conditions_are_refused_naming_the_node(condition, where, words):
    with pytest.raises(InvalidCondition) as caught:
        validate(condition)
    assert caught.value.where == where
    assert words in caught.value.message
    assert str(caught.value).startswith(f"{where}: ")


def test_the_error_also_carries_the_node_as_a_key_path():
    with pytest.raises(InvalidCondition) as caught:
        validate({"all": [TRUE, {"not": atom("payload.x", "nope")}]})
    assert caught.value.path == ("all", 1, "not", "op")


def test_the_caller_chooses_the_name_of_the_root_node():
    with pytest.raises(InvalidCondition) as caught:
        validate({"any": [atom("payload.x", "gt", "1")]}, where="steps[2].if")
    assert caught.value.where == "steps[2].if.any[0].value"


def test_allowed_roots_are_a_parameter_pipeline_level_conditions_cannot_read_config():
    """§2.1: a pipeline-level `if:` sees payload and context; only step-level adds config."""
    validate(atom("config.mode", "eq", "fast"))
    validate(atom("context.x", "exists"), roots=("payload", "context"))
    with pytest.raises(InvalidCondition) as caught:
        validate({"any": [TRUE, atom("config.mode", "eq", "fast")]}, roots=("payload", "context"))
    assert caught.value.where == "if.any[1].path"
    assert "'config.mode' is not a path under payload.* or context.*" in caught.value.message


def _nots(count, leaf):
    node = leaf
    for _ in range(count):
        node = {"not": node}
    return node


def test_depth_limit():
    validate(_nots(MAX_DEPTH, TRUE))  # the leaf sits exactly at the limit
    with pytest.raises(InvalidCondition) as caught:
        validate(_nots(MAX_DEPTH + 1, TRUE))
    assert caught.value.where == "if" + ".not" * (MAX_DEPTH + 1)
    assert f"deeper than {MAX_DEPTH}" in caught.value.message


def test_size_limit():
    validate({"all": [TRUE] * (MAX_NODES - 1)})  # the `all` itself plus its items: exactly the limit
    with pytest.raises(InvalidCondition) as caught:
        validate({"all": [TRUE] * MAX_NODES})
    assert caught.value.where == f"if.all[{MAX_NODES - 1}]"
    assert f"more than {MAX_NODES} nodes" in caught.value.message


def test_size_limit_counts_nodes_across_branches():
    half = {"any": [TRUE] * (MAX_NODES // 2)}
    with pytest.raises(InvalidCondition) as caught:
        validate({"all": [half, half]})
    assert caught.value.where.startswith("if.all[1].any[")
    assert "nodes" in caught.value.message


def test_find_root_names_the_first_node_reading_a_root():
    condition = {"all": [TRUE, {"any": [atom("payload.y", "exists"), {"not": atom("context.t", "exists")}]}]}
    assert find_root(condition, "context") == ("all", 1, "any", 1, "not", "path")
    assert find_root(condition, "config") is None
    assert find_root(atom("context", "exists"), "context") == ("path",)


def test_regex_is_re2_like_the_originals_go_regexp():
    scope = {"payload": {"name": "Zoë", "s": "a" * 64 + "!"}}
    assert evaluate(atom("payload.name", "regex", r"\p{L}+"), scope) is True  # Go syntax Python's re lacks
    # Nested quantifiers that make a backtracking engine take exponential time: RE2 answers at once.
    assert evaluate(atom("payload.s", "regex", r"(a+)+$"), scope) is False
    with pytest.raises(InvalidCondition) as caught:
        validate(atom("payload.s", "regex", r"(a)\1"))  # backreferences do not exist in RE2
    assert "invalid regex (RE2 syntax" in caught.value.message and "invalid escape sequence" in caught.value.message
