"""Settings for the webhook listener process: the gateway's settings serving only the webhook
surface (spec 000 §10), so a second gunicorn runs it on its own port (`webhooks.listen`)."""

from __future__ import annotations

from ductile_site.settings import *  # noqa: F403

ROOT_URLCONF = "gateway.http.webhooks.urls"
# The original's webhook listener answers no CORS: senders are servers, not browser pages.
MIDDLEWARE = [m for m in MIDDLEWARE if m != "corsheaders.middleware.CorsMiddleware"]  # noqa: F405
WSGI_APPLICATION = "gateway.http.webhooks.wsgi.application"
