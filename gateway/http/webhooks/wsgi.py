"""WSGI entry point of the webhook listener: `gunicorn gateway.http.webhooks.wsgi:application`.

Loads the config (and so the database location) before Django, then refuses to serve when the
config, webhooks.yaml included, is invalid or the database is behind the code: a listener that
cannot verify what it accepts must not answer at all. The exception stops gunicorn (a worker that
fails to boot halts it; with --preload the master itself exits), naming file, line and key.
"""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application
from django.db import connections

from gateway.bootstrap import leave_postgres_driver_unloaded, prepare_process
from gateway.runtime import RUNTIME
from gateway.storage.database import ensure_schema

# Set, not defaulted: with the API's settings inherited from the environment, this port would
# serve the whole API instead of the webhook surface alone.
os.environ["DJANGO_SETTINGS_MODULE"] = "ductile_site.settings_webhooks"
prepare_process(config_dir=None)
leave_postgres_driver_unloaded()
application = get_wsgi_application()

RUNTIME.get()  # a config that does not load (webhooks.yaml included) stops the listener here
ensure_schema()
# The start-up checks' connection belongs to no request thread, and with --preload it would be
# inherited by every forked worker: closed here, each request thread opens its own.
connections.close_all()
