"""The webhook listener's URLconf (`ductile_site.settings_webhooks`): `/healthz`, and every other
path dispatched on the configured endpoint paths, which a reload may change without a new URLconf."""

from __future__ import annotations

from django.urls import path, re_path

from gateway.http.webhooks import views

urlpatterns = [
    path("healthz", views.health, name="webhooks-healthz"),
    re_path(r"^.*$", views.receive, name="webhooks-receive"),
]

handler400 = "gateway.http.api.errors.bad_request"
handler403 = "gateway.http.api.errors.forbidden"
handler404 = views.page_not_found
handler500 = "gateway.http.api.errors.server_error"
