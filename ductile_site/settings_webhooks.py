"""Settings for the webhook listener process: the gateway's settings serving only the webhook
surface (spec 000 §10), so a second gunicorn runs it on its own port (`webhooks.listen`)."""

from __future__ import annotations

from ductile_site.settings import *  # noqa: F403

ROOT_URLCONF = "gateway.http.webhooks.urls"
WSGI_APPLICATION = "gateway.http.webhooks.wsgi.application"
