from __future__ import annotations

from django.apps import AppConfig


class PipelinesConfig(AppConfig):
    name = "pipelines"
    verbose_name = "Pipelines"
