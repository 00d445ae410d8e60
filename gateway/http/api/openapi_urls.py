"""OpenAPI discovery and Swagger UI. Included before the other API routes because
`plugin/<name>/openapi.json` would otherwise match the trigger route `plugin/<plugin>/<command>`."""

from __future__ import annotations

from django.urls import path, re_path
from django.views.generic import RedirectView

from gateway.http.api import openapi

urlpatterns = [
    path("openapi.json", openapi.OpenApiDocument.as_view(), name="openapi"),
    path("plugin/<str:name>/openapi.json", openapi.PluginOpenApiDocument.as_view(), name="plugin-openapi"),
    path("docs", openapi.SwaggerDocs.as_view(), name="docs"),
    # `/docs/`, as a person types it (Django's APPEND_SLASH only ever adds one): the canonical path.
    re_path(r"^docs/+$", RedirectView.as_view(pattern_name="docs", permanent=True, query_string=True)),
    path("docs/assets/<str:name>", openapi.swagger_asset, name="docs-asset"),
]
