"""Routes filled in by a later change."""

from __future__ import annotations

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
