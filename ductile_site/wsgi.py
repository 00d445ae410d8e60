"""WSGI entry point: loads the gateway config (and so the database location) before Django."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

from gateway.bootstrap import leave_postgres_driver_unloaded, prepare_process

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ductile_site.settings")
prepare_process(config_dir=None)
leave_postgres_driver_unloaded()
application = get_wsgi_application()
