"""`with:` templates (DSL reference §3.7) and baggage claims and accretion (§3.8, §4.2; spec 001
§3.2): unit tests plus property tests. Pure: no database, no processes."""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pipelines.baggage import BaggageError, BaggageSpec, accrete, check_key, parse
from pipelines.templates import TemplateError, references, remap, render

# -- strategies --------------------------------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)
# Names that are valid path segments (and durable key segments).
names = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True)
# Literal template text: anything without braces.
literals = st.text(alphabet=st.characters(blacklist_characters="{}"), max_size=10)


def same_json(a, b) -> bool:
    """Equal as JSON and of the same types all the way down (1 is not True, 1 is not 1.0 here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def as_text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


SCOPE = {
    "payload": {
        "user": "ada",
        "n": 7,
        "ratio": 0.5,
        "ok": True,
        "none": None,
        "tags": ["a", "é"],
        "meta": {"lang": "en", "pages": 3},
        "items": [{"name": "first"}, {"name": "second"}],
    },
    "context": {"origin": {"user": "grace", "channel": "c-1"}},
}

# -- with: templates ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{payload.n}", 7),
        ("{payload.ratio}", 0.5),
        ("{payload.ok}", True),
        ("{payload.none}", None),
        ("{payload.user}", "ada"),
        ("{payload.tags}", ["a", "é"]),
        ("{payload.meta}", {"lang": "en", "pages": 3}),
        ("{payload.items.1.name}", "second"),
        ("{payload.meta.pages}", 3),
        ("{context.origin.user}", "grace"),
        ("{context.origin}", {"user": "grace", "channel": "c-1"}),
        ("{ payload.n }", 7),
    ],
)
def test_a_pure_reference_keeps_the_type(template, expected):
    assert same_json(render(template, SCOPE), expected)


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("Build: {payload.user}", "Build: ada"),
        ("n={payload.n}", "n=7"),
        ("{payload.n} items", "7 items"),
        (" {payload.n}", " 7"),
        ("{payload.n}{payload.n}", "77"),
        ("{payload.user}/{context.origin.channel}", "ada/c-1"),
        ("ok={payload.ok} none={payload.none}", "ok=true none=null"),
        ("ratio {payload.ratio}", "ratio 0.5"),
        ("tags {payload.tags}", 'tags ["a", "é"]'),
        ("meta {payload.meta}", 'meta {"lang": "en", "pages": 3}'),
        ("first: {payload.items.0.name}!", "first: first!"),
    ],
)
def test_mixed_text_makes_a_string(template, expected):
    assert render(template, SCOPE) == expected


@pytest.mark.parametrize("value", ["plain text", "", 2, 2.5, True, None, [1, "x"], {"a": {"b": None}}])
def test_values_without_references_pass_through(value):
    assert render(value, SCOPE) == value


def test_nested_values_are_rendered_at_every_depth_and_keep_types():
    template = {"meta": {"count": "{payload.n}", "label": "n={payload.n}"}, "tags": ["{payload.n}", "fixed"]}
    assert render(template, SCOPE) == {"meta": {"count": 7, "label": "n=7"}, "tags": [7, "fixed"]}


def test_a_missing_path_deep_inside_a_nested_value_names_where_it_is():
    with pytest.raises(TemplateError) as caught:
        render({"meta": {"tags": ["ok", "{payload.nope}"]}}, SCOPE, key="with.extra")
    assert "with.extra.meta.tags[1]" in str(caught.value)
    assert "{payload.nope} is missing" in str(caught.value)


@pytest.mark.parametrize(
    "template",
    ["{payload.absent}", "{payload.meta.absent}", "{payload.items.5.name}", "{context.absent}", "x {payload.absent} y"],
)
def test_a_missing_path_raises_rather_than_substituting_null_or_empty(template):
    with pytest.raises(TemplateError, match="is missing"):
        render(template, SCOPE, key="with.msg")


def test_a_missing_root_raises():
    with pytest.raises(TemplateError, match=r"with.msg: \{context.user\} is missing"):
        render("{context.user}", {"payload": {}}, key="with.msg")


def test_references_lists_the_paths_a_template_reads():
    assert references("{payload.a} and {context.b.c}") == ["payload.a", "context.b.c"]
    assert references("no references") == []
    assert references(7) == []


@pytest.mark.parametrize(
    ("template", "words"),
    [
        ("{config.token}", "must reference payload.* or context.*"),
        ("{body.x}", "must reference payload.* or context.*"),
        ("{}", "must reference"),
        ("{ }", "must reference"),
        ("{payload..x}", "must reference"),
        ("{payload.}", "must reference"),
        ("{payload.x", "unbalanced braces"),
        ("payload.x}", "unbalanced braces"),
        ("{{payload.x}}", "unbalanced braces"),
        ("a } b", "unbalanced braces"),
        ("a { b", "unbalanced braces"),
        ("{payload.x}{", "unbalanced braces"),
    ],
)
def test_malformed_templates_raise_at_validation(template, words):
    with pytest.raises(TemplateError, match=r"with\.k") as caught:
        references(template, key="with.k")
    assert words in str(caught.value)
    with pytest.raises(TemplateError):  # and never render to something
        render(template, {"payload": {"x": 1}}, key="with.k")


def test_remap_adds_and_overrides_top_level_keys_only():
    payload = {"message": "old", "keep": 1}
    out = remap(payload, {"message": "new {payload.message}", "count": "{payload.keep}"}, {"payload": payload})
    assert out == {"message": "new old", "keep": 1, "count": 1}
    assert payload == {"message": "old", "keep": 1}  # the input is not modified


def test_every_entry_reads_the_same_pre_remap_snapshot():
    payload = {"a": "A", "b": "B"}
    out = remap(payload, {"a": "{payload.b}", "b": "{payload.a}"}, {"payload": payload})
    assert out == {"a": "B", "b": "A"}


def test_an_entry_never_sees_another_entrys_output():
    payload = {"x": 1}
    with pytest.raises(TemplateError, match=r"\{payload.fresh\} is missing"):
        remap(payload, {"fresh": "made here", "copy": "{payload.fresh}"}, {"payload": payload})
    with pytest.raises(TemplateError, match=r"\{payload.fresh\} is missing"):
        remap(payload, {"copy": "{payload.fresh}", "fresh": "made here"}, {"payload": payload})


@given(key=names, value=json_values)
def test_property_a_pure_reference_keeps_any_json_value_and_type(key, value):
    assert same_json(render(f"{{payload.{key}}}", {"payload": {key: value}}), value)
    assert same_json(render(f"{{context.{key}}}", {"payload": {}, "context": {key: value}}), value)


@given(
    parts=st.lists(st.tuples(literals, names, json_values), min_size=1, max_size=4),
    tail=literals,
)
def test_property_mixed_text_is_a_string_with_every_literal_part(parts, tail):
    assume(tail or any(text for text, _, _ in parts))
    payload = {key: value for _, key, value in parts}
    template = "".join(f"{text}{{payload.{key}}}" for text, key, _ in parts) + tail
    rendered = render(template, {"payload": payload})
    assert isinstance(rendered, str)
    assert rendered == "".join(text + as_text(payload[key]) for text, key, _ in parts) + tail
    position = 0
    for text, _, _ in parts:  # the literal parts, in order
        position = rendered.index(text, position) + len(text)
    assert rendered.endswith(tail)


@given(payload=st.dictionaries(names, json_values, min_size=1, max_size=6), data=st.data())
def test_property_entries_read_one_snapshot_whatever_the_order(payload, data):
    keys = list(payload)
    sources = data.draw(st.permutations(keys))
    with_ = {target: f"{{payload.{source}}}" for target, source in zip(keys, sources, strict=True)}
    out = remap(payload, with_, {"payload": payload})
    for target, source in zip(keys, sources, strict=True):
        assert same_json(out[target], payload[source])


@given(payload=st.dictionaries(names, json_values, max_size=4), key=names, text=literals)
def test_property_a_missing_path_always_raises(payload, key, text):
    assume(key not in payload)
    with pytest.raises(TemplateError, match="is missing"):
        render(f"{{payload.{key}}}", {"payload": payload})
    with pytest.raises(TemplateError, match="is missing"):
        render(f"{text}{{payload.{key}}}!", {"payload": payload})


@given(text=literals, brace=st.sampled_from("{}"), data=st.data())
def test_property_a_stray_brace_is_refused_at_validation(text, brace, data):
    at = data.draw(st.integers(0, len(text)))
    with pytest.raises(TemplateError):
        references(text[:at] + brace + text[at:])


# -- baggage: parse (load time) ----------------------------------------------------------------


def test_parse_claims_and_bulk_import():
    spec = parse(
        {
            "web.url": "payload.url",
            "trace_id": "context.trace_id",
            "from": "payload.metadata",
            "namespace": "whisper",
        }
    )
    assert spec.claims == (("web.url", "payload.url"), ("trace_id", "context.trace_id"))
    assert (spec.bulk_from, spec.namespace) == ("payload.metadata", "whisper")
    assert not spec.empty
    assert parse(None).empty and parse({}).empty and BaggageSpec().empty
    assert parse({"from": "payload", "namespace": "all.of.it"}).bulk_from == "payload"


@pytest.mark.parametrize(
    ("raw", "path", "words"),
    [
        (["web.url"], (), "must be a mapping"),
        ("payload.x", (), "must be a mapping"),
        ({"from": "payload.metadata"}, ("namespace",), "bulk import needs a namespace"),
        ({"from": "payload.metadata", "namespace": ""}, ("namespace",), "needs a namespace"),
        ({"from": "payload.metadata", "namespace": None}, ("namespace",), "needs a namespace"),
        ({"from": "payload.metadata", "namespace": "1st"}, ("namespace",), "must be a dotted path"),
        ({"from": "payload.metadata", "namespace": "a..b"}, ("namespace",), "must be a dotted path"),
        ({"namespace": "whisper"}, ("namespace",), "only valid with `from`"),
        ({"from": "context.metadata", "namespace": "w"}, ("from",), "must be payload or payload.<path>"),
        ({"from": "metadata", "namespace": "w"}, ("from",), "must be payload"),
        ({"from": 3, "namespace": "w"}, ("from",), "must be payload"),
        ({"web.url": "config.url"}, ("web.url",), "must be a payload.* or context.* path"),
        ({"web.url": "url"}, ("web.url",), "must be a payload.* or context.* path"),
        ({"web.url": "payload..url"}, ("web.url",), "must be a payload.* or context.* path"),
        ({"web.url": ""}, ("web.url",), "must be a payload.* or context.* path"),
        ({"web.url": None}, ("web.url",), "must be a payload.* or context.* path"),
        ({"web.url": ["payload.url"]}, ("web.url",), "must be a payload.* or context.* path"),
        ({"": "payload.x"}, ("",), "non-empty segments"),
        ({"web..url": "payload.x"}, ("web..url",), "non-empty segments"),
        ({".web": "payload.x"}, (".web",), "non-empty segments"),
        ({"web.": "payload.x"}, ("web.",), "non-empty segments"),
        ({"1web": "payload.x"}, ("1web",), "do not start with a digit"),
        ({"web.2url": "payload.x"}, ("web.2url",), "do not start with a digit"),
        ({"web-url": "payload.x"}, ("web-url",), "letters, digits and underscores"),
        ({"web url": "payload.x"}, ("web url",), "letters, digits and underscores"),
        ({"web.url\n": "payload.x"}, ("web.url\n",), "letters, digits and underscores"),
        ({"wéb": "payload.x"}, ("wéb",), "letters, digits and underscores"),
        ({"web.²": "payload.x"}, ("web.²",), "letters, digits and underscores"),
    ],
)
def test_parse_refusals_name_the_key(raw, path, words):
    with pytest.raises(BaggageError) as caught:
        parse(raw)
    assert caught.value.path == path
    assert words in caught.value.message
    assert str(caught.value).startswith("baggage")


@pytest.mark.parametrize("key", ["a", "_a", "web.url", "a1.b_2", "A.B", "x._y.z9"])
def test_valid_durable_keys(key):
    check_key(key, "k")


def _valid_key_oracle(key: str) -> bool:
    first = set(string.ascii_letters + "_")
    rest = first | set(string.digits)
    return all(seg and seg[0] in first and set(seg) <= rest for seg in key.split("."))


@given(key=st.text(alphabet=st.sampled_from(["a", "Z", "_", "1", ".", "-", " ", "é", "²", "\n"]), max_size=8))
def test_property_keys_are_dotted_paths_with_non_empty_segments_not_starting_with_a_digit(key):
    try:
        check_key(key, "k")
    except BaggageError:
        assert not _valid_key_oracle(key)
    else:
        assert _valid_key_oracle(key)


@given(source=st.text(max_size=12))
def test_property_sources_must_be_payload_or_context_paths(source):
    def valid(text: str) -> bool:
        parts = text.strip().split(".")
        return parts[0] in ("payload", "context") and all(parts)

    try:
        parse({"k": source})
    except BaggageError:
        assert not valid(source)
    else:
        assert valid(source)


# -- baggage: accrete (run time) ---------------------------------------------------------------


def claims(**mapping: str) -> BaggageSpec:
    return parse({key.replace("__", "."): source for key, source in mapping.items()})


def scope(payload, context=None):
    return {"payload": payload, "context": context or {}}


def test_claims_add_new_durable_paths():
    out = accrete({}, claims(web__url="payload.url", web__status="payload.status"), scope({"url": "u", "status": 200}))
    assert out == {"web": {"url": "u", "status": 200}}


def test_claims_deep_accrete_beside_inherited_paths():
    inherited = {"web": {"url": "u"}, "trace": "t"}
    out = accrete(inherited, claims(web__content="payload.text"), scope({"text": "hello"}, inherited))
    assert out == {"web": {"url": "u", "content": "hello"}, "trace": "t"}
    assert inherited == {"web": {"url": "u"}, "trace": "t"}  # the inherited context is not modified


def test_claims_can_read_inherited_context():
    inherited = {"origin": {"user": "ada"}}
    out = accrete(inherited, claims(report__by="context.origin.user"), scope({}, inherited))
    assert out["report"] == {"by": "ada"}


def test_a_claimed_object_merges_into_an_inherited_object():
    inherited = {"web": {"url": "u"}}
    out = accrete(inherited, claims(web="payload.web"), scope({"web": {"url": "u", "size": 3}}))
    assert out == {"web": {"url": "u", "size": 3}}


@pytest.mark.parametrize(
    ("inherited", "value"),
    [("x", "x"), (1, 1), (1, 1.0), (None, None), (True, True), ([1, "a"], [1, "a"]), ({"a": [1]}, {"a": [1]})],
)
def test_repeating_an_inherited_value_is_allowed(inherited, value):
    context = {"k": inherited}
    assert accrete(context, claims(k="payload.v"), scope({"v": value})) == context


@pytest.mark.parametrize(
    ("inherited", "value"),
    [
        ("original", "changed"),
        (1, 2),
        (1, "1"),
        (1, True),
        (0, False),
        (None, 0),
        (None, {"a": 1}),
        ("x", None),
        ([1, 2], [2, 1]),
        ([1], [True]),
        ([1], [1, 2]),
        ({"a": 1}, "a"),
        ({"a": 1}, {"a": 2}),
        ({"a": [1]}, {"a": [True]}),
    ],
)
def test_an_inherited_path_is_never_rewritten(inherited, value):
    with pytest.raises(BaggageError, match=r"cannot be rewritten|is already a value"):
        accrete({"k": inherited}, claims(k="payload.v"), scope({"v": value}))


def test_an_inherited_null_is_a_value_not_room_for_an_object():
    with pytest.raises(BaggageError, match="k is already a value"):
        accrete({"k": None}, claims(k__child="payload.v"), scope({"v": 1}))


def test_a_claim_below_an_inherited_scalar_is_refused():
    with pytest.raises(BaggageError, match="web is already a value, not an object"):
        accrete({"web": "u"}, claims(web__url="payload.url"), scope({"url": "u"}))


def test_a_missing_source_is_never_skipped():
    with pytest.raises(BaggageError, match=r"source payload\.absent is missing"):
        accrete({}, claims(x__y="payload.absent"), scope({}))
    with pytest.raises(BaggageError, match=r"source context\.nope is missing"):
        accrete({}, claims(x="context.nope"), scope({}))


def test_a_null_source_is_claimed_as_null():
    assert accrete({}, claims(x="payload.v"), scope({"v": None})) == {"x": None}


def test_bulk_import_places_an_object_under_its_namespace():
    spec = parse({"from": "payload.metadata", "namespace": "whisper"})
    out = accrete({"keep": 1}, spec, scope({"metadata": {"lang": "en", "secs": 12}}))
    assert out == {"keep": 1, "whisper": {"lang": "en", "secs": 12}}
    nested = parse({"from": "payload", "namespace": "raw.input"})
    assert accrete({}, nested, scope({"a": 1})) == {"raw": {"input": {"a": 1}}}


def test_bulk_import_accretes_like_claims():
    spec = parse({"from": "payload.metadata", "namespace": "whisper"})
    inherited = {"whisper": {"lang": "en"}}
    assert accrete(inherited, spec, scope({"metadata": {"lang": "en", "secs": 1}})) == {
        "whisper": {"lang": "en", "secs": 1}
    }
    with pytest.raises(BaggageError, match="cannot be rewritten"):
        accrete(inherited, spec, scope({"metadata": {"lang": "fr"}}))


@pytest.mark.parametrize(("payload", "words"), [({}, "is missing"), ({"metadata": [1]}, "is not an object")])
def test_bulk_import_needs_an_object(payload, words):
    with pytest.raises(BaggageError, match=words):
        accrete({}, parse({"from": "payload.metadata", "namespace": "w"}), scope(payload))


def contains(outer, inner) -> bool:
    """`outer` keeps every path of `inner` with the same value (objects may have grown)."""
    if isinstance(inner, dict):
        return isinstance(outer, dict) and all(k in outer and contains(outer[k], v) for k, v in inner.items())
    return same_json(outer, inner)


durable_keys = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3).map(".".join)
contexts = st.recursive(
    json_scalars,
    lambda inner: st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), inner, max_size=3),
    max_leaves=8,
).filter(lambda v: isinstance(v, dict))
claim_sets = st.dictionaries(durable_keys, json_values, max_size=4)


def _spec_and_scope(claimed: dict) -> tuple[BaggageSpec, dict]:
    sources = {f"v{i}": value for i, value in enumerate(claimed.values())}
    spec = parse({key: f"payload.v{i}" for i, key in enumerate(claimed)})
    return spec, {"payload": sources, "context": {}}


@given(inherited=contexts, claimed=claim_sets)
def test_property_accrete_never_removes_or_changes_an_inherited_path(inherited, claimed):
    spec, where = _spec_and_scope(claimed)
    snapshot = json.loads(json.dumps(inherited))
    try:
        out = accrete(inherited, spec, where)
    except BaggageError:
        return
    assert contains(out, inherited)
    assert same_json(inherited, snapshot)  # and the input itself is untouched


@given(inherited=contexts, claimed=claim_sets)
def test_property_accretion_is_idempotent(inherited, claimed):
    spec, where = _spec_and_scope(claimed)
    try:
        once = accrete(inherited, spec, where)
    except BaggageError:
        return
    assert same_json(accrete(once, spec, where), once)  # repeating the same values is allowed


@given(claimed=claim_sets)
def test_property_claims_land_at_their_paths(claimed):
    spec, where = _spec_and_scope(claimed)
    try:
        out = accrete({}, spec, where)
    except BaggageError:
        return  # two claims of this step overlap (`a` and `a.b`) with values that disagree
    for key, value in claimed.items():
        node = out
        for part in key.split("."):
            node = node[part]
        assert contains(node, value)


@given(key=durable_keys, old=json_scalars, new=json_scalars)
def test_property_a_different_value_always_raises(key, old, new):
    assume(not same_json(old, new) and not (type(old) in (int, float) and type(new) in (int, float) and old == new))
    inherited = accrete({}, parse({key: "payload.v"}), scope({"v": old}))
    with pytest.raises(BaggageError, match="cannot be rewritten"):
        accrete(inherited, parse({key: "payload.v"}), scope({"v": new}))


# -- the reserved control namespace and the context cap ---------------------------------------


@pytest.mark.parametrize("raw", [{"ductile.route_depth": "payload.n"}, {"from": "payload", "namespace": "ductile"}])
def test_claims_into_the_reserved_ductile_namespace_are_refused_at_load(raw):
    with pytest.raises(BaggageError) as caught:
        parse(raw)
    assert "namespace is reserved for the core's control fields" in caught.value.message


def _one_step(baggage):
    from gateway.config.durations import parse_duration
    from pipelines.dsl import compile_pipelines

    pipelines = [{"name": "p", "on": "p.start", "steps": [{"id": "s", "uses": "probe", "baggage": baggage}]}]
    return compile_pipelines(pipelines, {"probe": ["handle"]}, parse_duration).pipelines["p"]


def test_control_fields_cannot_be_forged_by_inherited_context_or_payload():
    from pipelines.successors import step_successor

    pipeline = _one_step({"seen.depth": "context.ductile.route_depth"})
    forged = {"ductile": {"pipeline": "p", "route_depth": 99, "pipeline_instance_id": "forged"}}
    hop = step_successor(pipeline, "s", {"event_id": "e-1", "payload": {"ductile": "x"}}, forged, 3)
    assert hop.refusal is None and hop.context is not None
    # An entry step starts a new instance, named by the event; the core sets depth and step.
    assert hop.context["ductile"] == {"pipeline": "p", "step": "s", "route_depth": 3, "pipeline_instance_id": "e-1"}
    assert hop.context["seen"] == {"depth": 99}  # claims may read the inherited control fields


def test_accumulated_context_over_one_mib_stops_the_hop():
    from pipelines.successors import step_successor

    pipeline = _one_step({"blob.text": "payload.text"})
    big = step_successor(pipeline, "s", {"payload": {"text": "x" * (1024 * 1024)}}, {}, 1)
    assert big.refusal and "over the 1 MiB cap" in big.refusal
    small = step_successor(pipeline, "s", {"payload": {"text": "x" * 1000}}, {}, 1)
    assert small.refusal is None and small.context is not None and small.context["blob"]["text"] == "x" * 1000
