from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    # The live views: pages for people (the admin session), before the API's routes.
    path("dashboard/", include("gateway.http.dashboard.urls")),
    path("", include("gateway.http.api.urls")),
]

# Errors outside DRF views are JSON too: an agent never has to parse an HTML page.
handler400 = "gateway.http.api.errors.bad_request"
handler403 = "gateway.http.api.errors.forbidden"
handler404 = "gateway.http.api.errors.not_found"
handler500 = "gateway.http.api.errors.server_error"
