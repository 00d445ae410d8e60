"""`/dashboard/` routes (ARCHITECTURE "Human surfaces")."""

from __future__ import annotations

from django.urls import path

from gateway.http.dashboard import views

app_name = "dashboard"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("pipelines/", views.pipelines, name="pipelines"),
    path("stream", views.stream, name="stream"),
]
