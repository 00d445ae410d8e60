"""OpenAPI discovery (spec 000 "API Reference", "OpenAPI Discovery"): `GET /openapi.json`,
`GET /plugin/{name}/openapi.json` and Swagger UI at `/docs`.

`/openapi.json` is drf-spectacular's document for the API itself (the annotations in
`gateway.http.api.views`), extended with one operation per discovered plugin command, read from the
current runtime on every request so that a config reload shows at once.

Each command operation's request body is the API's real body, `{"payload": …}`, with the
manifest's `input_schema` describing `payload`. The spec's example shows the input schema as the
whole body; a client following that would send its fields at the top level, where
`POST /plugin/{plugin}/{command}` ignores them, so the document follows the API instead.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import drf_spectacular_sidecar
from django.http import FileResponse, Http404, HttpRequest
from django.urls import reverse
from django.views.decorators.http import require_GET
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.renderers import OpenApiJsonRenderer2
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.request import Request
from rest_framework.response import Response

from gateway.config.tokens import ADMIN
from gateway.http.api.errors import Missing
from gateway.http.api.serializers import DEDUPE_KEY_HELP, DEDUPE_KEY_MAX, ERROR_MEANINGS, errors
from gateway.http.api.views import OPEN, Endpoint
from gateway.plugins.manifest import CommandSpec
from gateway.plugins.registry import PluginInstance
from gateway.reports.skills import command_scopes, expand_input_schema
from gateway.runtime import RUNTIME
from gateway.version import gateway_version

SECURITY_SCHEME = "BearerAuth"
DESCRIPTION = (
    "Ductile's HTTP API. Discovery (`/`, `/healthz`, `/plugins`, `/skills`, this document) is open; everything "
    "else takes `Authorization: Bearer <token>`, and each operation's `security` lists the scopes any one of "
    "which lets it through (`jobs:ro` grants the finer `jobs:*:ro`, `plugin:ro` grants `plugin:catalog:ro`, a "
    "`rw` scope its `ro`). Every plugin "
    'command has its own operation, tagged with the plugin\'s name. Errors are `{"error": "…"}`.'
)
SCHEMA_REF = "#/components/schemas/"


class BearerAuthScheme(OpenApiAuthenticationExtension):
    """`BearerAuthentication` as the `BearerAuth` scheme; open endpoints require no security."""

    target_class = "gateway.http.api.auth.BearerAuthentication"
    name = SECURITY_SCHEME

    def get_security_definition(self, auto_schema: AutoSchema) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A token from `api.auth.tokens` or tokens.yaml; each operation says which scopes it needs.",
        }

    def get_security_requirement(self, auto_schema: AutoSchema) -> dict[str, list[str]] | list[dict[str, list[str]]]:
        view = auto_schema.view
        if isinstance(view, Endpoint):
            return [] if view.needs is OPEN else security(view.needs)
        return {self.name: []}


def security(needs: Sequence[str]) -> list[dict[str, list[str]]]:
    """An operation's `security`: one requirement per scope that is enough on its own (OpenAPI reads
    a list of requirements as alternatives), `*` last. A scope names its route parameter as the path
    does (`{name}:ro`); the broad scopes that grant a finer one are in the operation's description."""
    return [{SECURITY_SCHEME: [scope]} for scope in dict.fromkeys([*needs, ADMIN])]


# -- the API part: drf-spectacular ------------------------------------------------------------

_api_lock = threading.Lock()
_api_document: dict[str, Any] | None = None


def api_document() -> dict[str, Any]:
    """drf-spectacular's document for the API's own routes, with every operation's security
    explicit (`[]` where the endpoint is open). It depends only on the code, so it is generated
    once per process (drf-spectacular keeps generation state in globals, so one at a time) and
    copied for each caller."""
    global _api_document
    with _api_lock:
        if _api_document is None:
            generator = SpectacularAPIView.generator_class()
            document = generator.get_schema(request=None, public=True)
            for operation in operations(document):
                operation.setdefault("security", [])
            document["info"].update(version=gateway_version(), description=DESCRIPTION)
            _api_document = document
        return copy.deepcopy(_api_document)


def operations(document: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    methods = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
    for item in document.get("paths", {}).values():
        yield from (item[m] for m in methods if m in item)


# -- the plugin part: one operation per command, from the runtime -----------------------------


def _error(code: int) -> dict[str, Any]:
    return {
        "description": ERROR_MEANINGS[code],
        "content": {"application/json": {"schema": {"$ref": f"{SCHEMA_REF}Error"}}},
    }


def command_operation(plugin: str, command: CommandSpec) -> dict[str, Any]:
    needs = " or ".join(f"`{scope}`" for scope in command_scopes(plugin, command.type))
    also = "their `rw` forms or `*`" if command.type == "read" else "`*`"
    operation: dict[str, Any] = {
        "operationId": f"{plugin}__{command.name}",
        "summary": command.description or f"{plugin}: {command.name}",
        "description": f"Enqueues one `{plugin}` `{command.name}` job. A {command.type} command: needs {needs} "
        f'(or {also}). The body is `{{"payload": {{…}}}}`; the manifest\'s input_schema describes `payload`.',
        "tags": [plugin],
        "security": security(command_scopes(plugin, command.type)),
        "responses": {
            "202": {
                "description": "Job queued.",
                "content": {"application/json": {"schema": {"$ref": f"{SCHEMA_REF}TriggerAccepted"}}},
            },
            **{str(code): _error(code) for code in (400, 401, 403, 404, 415)},
        },
    }
    if command.input_schema is not None:  # none declared: the spec omits the body
        body = {
            "type": "object",
            "properties": {
                "payload": expand_input_schema(command.input_schema),
                "dedupe_key": {"type": ["string", "null"], "maxLength": DEDUPE_KEY_MAX, "description": DEDUPE_KEY_HELP},
            },
        }
        operation["requestBody"] = {"required": False, "content": {"application/json": {"schema": body}}}
    return operation


def plugin_paths(instances: Mapping[str, PluginInstance]) -> dict[str, dict[str, Any]]:
    return {
        f"/plugin/{name}/{command.name}": {"post": command_operation(name, command)}
        for name, instance in sorted(instances.items())
        for command in instance.manifest.commands.values()
    }


def plugin_tags(instances: Mapping[str, PluginInstance]) -> list[dict[str, str]]:
    return [{"name": name, "description": inst.manifest.description} for name, inst in sorted(instances.items())]


def global_document() -> dict[str, Any]:
    document = api_document()
    instances = RUNTIME.get().registry.instances
    document["paths"] = dict(sorted({**document["paths"], **plugin_paths(instances)}.items()))
    document["tags"] = [*document.get("tags", []), *plugin_tags(instances)]
    return document


def plugin_document(name: str) -> dict[str, Any]:
    """The document scoped to one plugin: its command operations and what they refer to."""
    instance = RUNTIME.get().registry.instances.get(name)
    if instance is None:
        raise Missing("plugin not found", f"no loaded plugin named {name!r}")
    api = api_document()
    paths = plugin_paths({name: instance})
    schemas = api["components"]["schemas"]
    return {
        "openapi": api["openapi"],
        "info": api["info"],
        "tags": plugin_tags({name: instance}),
        "paths": paths,
        "components": {
            "schemas": {ref: schemas[ref] for ref in sorted(_referenced(paths, schemas))},
            "securitySchemes": api["components"]["securitySchemes"],
        },
    }


def _referenced(node: Any, schemas: Mapping[str, Any], found: set[str] | None = None) -> set[str]:
    """Component schema names `node` refers to, transitively."""
    found = set() if found is None else found
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(SCHEMA_REF) and (name := ref.removeprefix(SCHEMA_REF)) not in found:
            found.add(name)
            _referenced(schemas[name], schemas, found)
        children = list(node.values())
    else:
        children = node if isinstance(node, list) else []
    for child in children:
        _referenced(child, schemas, found)
    return found


# -- views ------------------------------------------------------------------------------------

DOCUMENT = OpenApiResponse(OpenApiTypes.OBJECT, description="An OpenAPI 3.1 document.")


class OpenApiDocument(SpectacularAPIView):
    """Open to everyone, and a token is not even read: the document is public."""

    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []
    renderer_classes = [OpenApiJsonRenderer2]  # application/json, which agents expect at *.json

    @extend_schema(
        operation_id="openapi",
        tags=["discovery"],
        summary="OpenAPI document",
        description="This document: the API, and one operation per discovered plugin command. Open.",
        responses={200: DOCUMENT},
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(global_document())


class PluginOpenApiDocument(OpenApiDocument):
    @extend_schema(
        operation_id="plugin_openapi",
        tags=["discovery"],
        summary="One plugin's OpenAPI document",
        description="Only the plugin's command operations and the components they use. Open.",
        parameters=[OpenApiParameter("name", OpenApiTypes.STR, OpenApiParameter.PATH, description="A loaded plugin.")],
        responses={200: DOCUMENT, **errors(404)},
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(plugin_document(kwargs["name"]))


# Swagger UI's files come from drf-spectacular-sidecar and are served here: the UI works without
# network access, and without a static-files server in front of gunicorn.
SWAGGER_DIST = Path(drf_spectacular_sidecar.__file__).parent / "static" / "drf_spectacular_sidecar" / "swagger-ui-dist"
SWAGGER_FILES = frozenset(
    {"swagger-ui.css", "swagger-ui-bundle.js", "swagger-ui-standalone-preset.js", "favicon-32x32.png"}
)


class SwaggerDocs(SpectacularSwaggerSplitView):
    # The split view: the page loads its start-up script from `/docs?script=` rather than inline,
    # so the site's Content-Security-Policy (gateway/http/csp.py) needs no inline script.
    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []
    url_name = "openapi"

    # drf-spectacular's hooks for where the UI's files are (a CDN by default).
    @staticmethod
    def _swagger_ui_resource(filename: str) -> str:
        return reverse("docs-asset", args=[filename])

    @staticmethod
    def _swagger_ui_favicon() -> str:
        return reverse("docs-asset", args=["favicon-32x32.png"])


@require_GET
def swagger_asset(request: HttpRequest, name: str) -> FileResponse:
    if name not in SWAGGER_FILES:
        raise Http404(name)
    return FileResponse((SWAGGER_DIST / name).open("rb"))
