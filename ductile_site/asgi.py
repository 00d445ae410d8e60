from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

from gateway.bootstrap import prepare_process

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ductile_site.settings")
prepare_process(config_dir=None)
application = get_asgi_application()
