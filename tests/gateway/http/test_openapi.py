"""OpenAPI discovery: `/openapi.json` is valid OpenAPI 3.1, lists every API route and every plugin
command (compact `input_schema` expanded), follows config reloads; `/plugin/{name}/openapi.json`
is scoped to one plugin; Swagger UI works offline; and the live API conforms to the document
(schemathesis, in-process, zero server errors and zero schema violations)."""

from __future__ import annotations

import json
import re
from itertools import product
from typing import Any

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.management import call_command
from django.urls import URLPattern, URLResolver, get_resolver
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from hypothesis.strategies import one_of
from openapi_spec_validator import OpenAPIV31SpecValidator, validate
from rest_framework.test import APIClient
from rest_framework.views import APIView
from schemathesis import GenerationMode
from schemathesis.core.result import Err

from gateway.http.api.mcp import Mcp
from gateway.http.api.openapi import SwaggerDocs, expand_input_schema
from gateway.runtime import RUNTIME
from ledger.models import Job
from tests.support.config_dirs import PLUGIN_ROOTS
from tests.support.runtime import load_runtime

# Real commits: schemathesis calls the WSGI app, which closes the database connection at each
# request's end as in production (Django's test client does not), ending a test's transaction.
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ADMIN = "Bearer tok-admin"
# Every scope an operation's `security` names, route parameters filled as the tests fill them ("x").
ONE = [
    "plugin:catalog:ro",
    "plugin:ro",
    "plugin:rw",
    "jobs:ro",
    "jobs:status:ro",
    "jobs:tree:ro",
    "jobs:logs:ro",
    "events:ro",
    *(f"{name}:{access}" for name in ("x", "echo", "probe", "shapes") for access in ("ro", "rw")),
]

# A plugin whose commands cover the ways a manifest declares its input.
SHAPES_MANIFEST = """\
manifest_spec: ductile.plugin
manifest_version: 1
name: shapes
version: 1.0.0
protocol: 2
entrypoint: run.sh
description: "Input schema shapes."
commands:
  - name: full
    type: read
    description: "Takes a JSON Schema."
    input_schema:
      type: object
      required: [url]
      properties:
        url: {type: string, format: uri}
        tags: {type: array, items: {type: string}}
  - name: compact
    type: write
    input_schema:
      url: string
      depth: integer
      options: {type: object}
  - name: bare
    type: read
  - name: broken
    type: read
    input_schema:
      url: strnig
"""


@pytest.fixture
def api(config_dir, tmp_path, request):
    root = tmp_path / "more-plugins"
    (root / "shapes").mkdir(parents=True)
    (root / "shapes" / "manifest.yaml").write_text(SHAPES_MANIFEST)
    entry = root / "shapes" / "run.sh"
    entry.write_text('#!/bin/sh\necho \'{"status": "ok"}\'\n')
    entry.chmod(0o755)
    config_dir.plugins["shapes"] = {"config": {}}
    config_dir.extra["plugin_roots"] = [*PLUGIN_ROOTS, str(root)]
    config_dir.extra["api"] = {
        "enabled": True,
        "auth": {
            "tokens": [
                {"name": "admin", "token": "tok-admin", "scopes": ["*"]},
                # One token per scope an operation's `security` may name, holding that scope alone.
                *(
                    {"name": f"only-{i}", "token": f"tok-only-{scope}", "scopes": [scope]}
                    for i, scope in enumerate(ONE)
                ),
            ]
        },
    }
    config_dir.extra["pipelines"] = [
        {"name": "flow", "on": "flow.start", "steps": [{"id": "a", "uses": "echo"}]},
        # Synchronous with two entry dispatches: refused with 400 before anything runs.
        {
            "name": "fan",
            "on": "fan.start",
            "execution_mode": "synchronous",
            "steps": [{"split": [{"uses": "echo"}, {"uses": "probe"}]}],
        },
        # Synchronous, and no worker runs in these tests: 202 `timeout_exceeded` after 50 ms.
        {
            "name": "quick",
            "on": "quick.start",
            "execution_mode": "synchronous",
            "timeout": "50ms",
            "steps": [{"uses": "echo"}],
        },
    ]
    request.getfixturevalue("runtime")
    return APIClient()


def document(client: APIClient, path: str = "/openapi.json") -> dict[str, Any]:
    response = client.get(path)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("application/json")
    return json.loads(response.content)


def operations(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {op["operationId"]: op for item in doc["paths"].values() for op in item.values()}


def test_the_document_is_valid_openapi_3_1_and_open(api):
    api.credentials(HTTP_AUTHORIZATION="Bearer not-a-token")  # not even read: the document is public
    doc = document(api)
    assert doc["openapi"].startswith("3.1")
    validate(doc, cls=OpenAPIV31SpecValidator)
    assert doc["info"]["title"] == "Ductile Gateway"
    scheme = doc["components"]["securitySchemes"]["BearerAuth"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")


def test_drf_spectacular_generates_it_without_a_warning(tmp_path):
    """Every view is annotated: nothing is guessed (a guess is a warning, and often wrong)."""
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))


def drf_routes(patterns: list[Any] | None = None, prefix: str = "") -> dict[str, type[APIView]]:
    """Every DRF view the URLconf routes to, by OpenAPI path (`<str:x>` as `{x}`)."""
    found: dict[str, type[APIView]] = {}
    for entry in get_resolver().url_patterns if patterns is None else patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            found.update(drf_routes(entry.url_patterns, route))
        elif isinstance(entry, URLPattern) and isinstance(view := getattr(entry.callback, "cls", None), type):
            found["/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)] = view
    return found


# Routes that are no REST operations, left out of the document on purpose, each with why.
NOT_REST = {Mcp: "MCP's one JSON-RPC endpoint: its operations are the protocol's, listed by tools/list (docs/mcp.md)"}


def test_every_api_route_and_method_is_documented(api):
    paths = document(api)["paths"]
    routes = {path: view for path, view in drf_routes().items() if view is not SwaggerDocs and view not in NOT_REST}
    assert not {path for path, view in drf_routes().items() if view in NOT_REST} & set(paths)
    assert len(routes) >= 16
    for path, view in routes.items():
        assert path in paths, f"{path} ({view.__name__}) is missing"
        methods = {m for m in ("get", "post", "put", "patch", "delete") if hasattr(view, m)}
        assert set(paths[path]) == methods, path


def test_security_says_which_operations_need_a_token(api):
    """`security: []` exactly where an anonymous call is let through."""
    doc = document(api)
    for path, item in doc["paths"].items():
        if path == "/events":
            continue  # a stream that does not end; its authentication is tested with the stream
        for method, operation in item.items():
            url = re.sub(r"\{\w+\}", "x", path)
            response = getattr(api, method)(url, {}, format="json") if method == "post" else api.get(url)
            if operation["security"] == []:
                assert response.status_code != 401, f"{method} {path} is documented open but wants a token"
            else:
                assert operation["security"][-1] == {"BearerAuth": ["*"]}
                assert all(len(r["BearerAuth"]) == 1 for r in operation["security"]), "each one is enough alone"
                assert response.status_code == 401, f"{method} {path} is documented secured but is open"
                assert "401" in operation["responses"]


def test_each_scope_an_operation_lists_lets_a_token_holding_only_it_through(api):
    """`security` names the scopes (any one) each operation needs, as the views check them (what a
    token without them meets: test_api's finer-scope tests)."""
    checked = 0
    for path, item in document(api)["paths"].items():
        if path in ("/events", "/plugin/{plugin}/{command}"):
            continue  # a stream that does not end; the generic trigger's scope depends on the command's type
        for method, operation in item.items():
            url = re.sub(r"\{\w+\}", "x", path)
            for requirement in operation["security"][:-1]:  # the last is `*`
                scope = re.sub(r"\{\w+\}", "x", requirement["BearerAuth"][0])
                if scope.partition(":")[0] in set(RUNTIME.get().registry.instances) - {"echo", "probe", "shapes"}:
                    continue  # the other bundled plugins' scopes are formed as these three's are
                assert scope in ONE, f"{method} {path} names {scope!r}: add it to ONE"
                api.credentials(HTTP_AUTHORIZATION=f"Bearer tok-only-{scope}")
                response = api.post(url, {}, format="json") if method == "post" else api.get(url)
                assert response.status_code not in (401, 403), (method, path, scope, response.content)
                checked += 1
    assert checked >= 12


def test_methods_an_operation_does_not_have_are_405_json(api):
    api.credentials(HTTP_AUTHORIZATION=ADMIN)
    for path in document(api)["paths"]:
        response = api.delete(re.sub(r"\{\w+\}", "x", path))
        assert response.status_code == 405, path
        assert set(response.json()) == {"error"}


def test_every_plugin_command_has_its_own_operation(api):
    doc = document(api)
    ops = operations(doc)
    instances = RUNTIME.get().registry.instances
    assert {"echo", "probe", "shapes"} <= set(instances)
    for name, instance in instances.items():
        for command in instance.manifest.commands.values():
            operation = doc["paths"][f"/plugin/{name}/{command.name}"]["post"]
            assert ops[f"{name}__{command.name}"] is operation
            assert operation["summary"] == (command.description or f"{name}: {command.name}")
            assert operation["tags"] == [name]
            access = "ro" if command.type == "read" else "rw"
            assert operation["security"] == [{"BearerAuth": [s]} for s in (f"plugin:{access}", f"{name}:{access}", "*")]
            assert operation["responses"]["202"]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/TriggerAccepted"
            }
            assert ("requestBody" in operation) == (command.input_schema is not None)
    assert {t["name"] for t in doc["tags"]} >= set(instances)
    echo = ops["echo__poll"]["requestBody"]
    assert echo["required"] is False
    body = echo["content"]["application/json"]["schema"]
    assert body["properties"]["payload"] == {"type": "object", "properties": {"message": {"type": "string"}}}


def payload_schema(doc: dict[str, Any], command: str) -> dict[str, Any]:
    operation = doc["paths"][f"/plugin/shapes/{command}"]["post"]
    return operation["requestBody"]["content"]["application/json"]["schema"]["properties"]["payload"]


def test_input_schemas_full_compact_absent_and_broken(api):
    doc = document(api)
    assert payload_schema(doc, "full") == {
        "type": "object",
        "required": ["url"],
        "properties": {
            "url": {"type": "string", "format": "uri"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
    }
    assert payload_schema(doc, "compact") == {
        "type": "object",
        "properties": {"url": {"type": "string"}, "depth": {"type": "integer"}, "options": {"type": "object"}},
    }
    assert doc["paths"]["/plugin/shapes/compact"]["post"]["summary"] == "shapes: compact"
    assert "requestBody" not in doc["paths"]["/plugin/shapes/bare"]["post"]
    broken = payload_schema(doc, "broken")
    assert broken["type"] == "object" and "not valid JSON Schema" in broken["description"]


@pytest.mark.parametrize(
    ("declared", "expanded"),
    [
        ({}, {"type": "object", "properties": {}}),
        ({"n": "integer"}, {"type": "object", "properties": {"n": {"type": "integer"}}}),
        ({"type": "object"}, {"type": "object"}),
        ({"properties": {"a": {"type": "string"}}}, {"properties": {"a": {"type": "string"}}}),
        ({"oneOf": [{"type": "object"}]}, {"oneOf": [{"type": "object"}]}),
    ],
)
def test_expand_input_schema(declared, expanded):
    assert expand_input_schema(declared) == expanded


def test_a_reload_shows_in_the_document(api, config_dir):
    assert "/plugin/py-greet/poll" in document(api)["paths"]
    del config_dir.plugins["py-greet"]
    load_runtime(config_dir)
    doc = document(api)
    assert "/plugin/py-greet/poll" not in doc["paths"]
    assert "py-greet" not in {t["name"] for t in doc["tags"]}
    assert api.get("/plugin/py-greet/openapi.json").status_code == 404


def test_one_plugins_document(api):
    doc = document(api, "/plugin/echo/openapi.json")
    validate(doc, cls=OpenAPIV31SpecValidator)
    assert set(doc["paths"]) == {"/plugin/echo/poll", "/plugin/echo/handle", "/plugin/echo/health"}
    assert set(doc["components"]["schemas"]) == {"Error", "TriggerAccepted"}
    assert set(doc["components"]["securitySchemes"]) == {"BearerAuth"}
    assert doc["tags"] == [
        {"name": "echo", "description": RUNTIME.get().registry.instances["echo"].manifest.description}
    ]
    assert doc["paths"]["/plugin/echo/poll"] == document(api)["paths"]["/plugin/echo/poll"]


def test_an_unknown_plugins_document_is_404_json(api):
    response = api.get("/plugin/nope/openapi.json")
    assert response.status_code == 404  # not 405 from the trigger route, which only takes POST
    assert response.json() == {"error": "plugin not found", "detail": "no loaded plugin named 'nope'"}


def test_swagger_ui_is_served_with_its_files_and_no_network(api):
    page = api.get("/docs")
    assert page.status_code == 200 and page["Content-Type"].startswith("text/html")
    html = page.content.decode()
    assert "cdn" not in html.lower()
    assets = re.findall(r'(?:href|src)="(/docs/assets/[^"]+)"', html)
    assert len(assets) == 4
    # Its start-up script is served apart (the Content-Security-Policy allows no inline script).
    assert '<script src="/docs?script="></script>' in html
    script = api.get("/docs?script=").content.decode()
    assert '"/openapi.json"' in script and "cdn" not in script.lower()
    for asset in assets:
        response = api.get(asset)
        assert response.status_code == 200, asset
        assert b"".join(response.streaming_content)
    missing = api.get("/docs/assets/secret.txt")
    assert missing.status_code == 404 and "error" in missing.json()


# -- conformance: schemathesis against the live in-process app ----------------------------------


@pytest.mark.parametrize(
    ("path", "body", "code"),
    [
        ("/plugin/echo/poll", {"payload": {"message": "a\u0000b"}}, 400),
        ("/plugin/echo/poll", {"payload": {"message": ["\udaa6"]}}, 400),
        ("/plugin/echo/poll", {"payload": {"a\u0000": 1}}, 400),
        ("/plugin/echo/poll", {"dedupe_key": "k" * 513}, 400),
        ("/plugin/echo/poll", {"dedupe_key": "a\u0000"}, 400),
        ("/pipeline/flow", {"payload": {"message": "a\u0000b"}}, 400),
        ("/jobs?plugin=a%00b", None, 400),
        ("/job-logs?query=a%00b", None, 400),
        ("/job/a%00b", None, 404),
        ("/job/a%00b/tree", None, 404),
        ("/job-logs?from=0001-01-01T00:00:00%2B01:00", None, 400),
        ("/job-logs?to=1512-10-22T13:50:09.1-21:57", None, 200),
    ],
)
def test_what_schemathesis_found_on_postgresql_is_an_answer_not_a_500(api, path, body, code):
    """NUL, unpaired surrogates, a dedupe key wider than its column and a UTC offset past ±15:59
    were 500s on PostgreSQL (a year-1 time just east of UTC on SQLite too)."""
    api.credentials(HTTP_AUTHORIZATION=ADMIN)
    if body is None:
        response = api.get(path)
    else:
        response = api.generic("POST", path, json.dumps(body), content_type="application/json")
    assert response.status_code == code, response.content
    assert Job.objects.count() == 0


# Not `negative_data_rejection` or `positive_data_acceptance`: a command's `input_schema` documents
# its payload and is not enforced (as in the original), flags are lenient (`include_result=7` is
# false), and strings PostgreSQL cannot store are refused though JSON Schema allows them.
CHECKS = [
    schemathesis.checks.not_a_server_error,
    schemathesis.checks.status_code_conformance,
    schemathesis.checks.content_type_conformance,
    schemathesis.checks.response_schema_conformance,
    schemathesis.checks.ignored_auth,  # an operation documented as secured refuses a call without a token
]
EXAMPLES = 12


def test_the_api_conforms_to_its_document(api):
    """Every operation, with valid and with invalid input, as an admin: no 5xx, every status code
    and body as documented. `/events` streams without end, so it is left to its own tests.

    Random path parameters only find 404s, so names that exist are tried as well."""
    api.credentials(HTTP_AUTHORIZATION=ADMIN)
    job_id = api.post("/plugin/echo/poll", {"payload": {"message": "hi"}}, format="json").json()["job_id"]
    known = {"name": ["echo", "flow", "fan", "quick"], "plugin": ["echo"], "command": ["poll"], "job_id": [job_id]}
    schema = schemathesis.openapi.from_wsgi("/openapi.json", WSGIHandler())
    failures = []
    tested = 0
    for result in schema.get_all_operations():
        if isinstance(result, Err):
            raise result.err()  # an operation schemathesis cannot read: the document is wrong there
        operation = result.ok()
        if operation.path == "/events":
            continue
        names = re.findall(r"\{(\w+)\}", operation.path)
        bindings = [dict(zip(names, values, strict=True)) for values in product(*(known.get(n, []) for n in names))]
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            strategy = one_of(
                operation.as_strategy(generation_mode=mode),
                *(operation.as_strategy(generation_mode=mode, path_parameters=b) for b in bindings if names),
            )

            @given(case=strategy)
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                derandomize=True,
                phases=[Phase.explicit, Phase.generate, Phase.shrink],
                suppress_health_check=list(HealthCheck),
            )
            def call(case: schemathesis.Case) -> None:
                case.call_and_validate(headers={"Authorization": ADMIN}, checks=CHECKS)

            try:
                call()
            except Unsatisfiable:
                pass  # nothing in this operation can be made invalid (no parameters, any string goes)
            except (Exception, BaseExceptionGroup) as exc:  # schemathesis' FailureGroup is a BaseExceptionGroup
                failures.append(f"{operation.label} ({mode.value}): {exc}")
        tested += 1
    assert tested >= 25
    assert not failures, "\n\n".join(failures)
