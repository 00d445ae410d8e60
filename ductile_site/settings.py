"""Django settings, read from the environment only.

The gateway's own config directory is loaded by `gateway.bootstrap` before Django starts; it
exports the database location as `DUCTILE_DB_PATH` (from the config's `state.path`) unless the
operator set `DATABASE_URL`, which always wins.
"""

from __future__ import annotations

import ipaddress
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "ductile-local-insecure-key-set-DJANGO_SECRET_KEY")
DEBUG = os.environ.get("DJANGO_DEBUG", "") == "1"
ALLOWED_HOSTS = [h for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "*").split(",") if h]

INSTALLED_APPS = [
    # django.contrib.admin with the audit console as its site (gateway/console/site.py).
    "gateway.console.apps.ConsoleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "corsheaders",
    # The gateway's own housekeeping (retention, scheduled backups) only; plugin jobs never go
    # through it (docs/architecture.md, "Where django-q2 fits").
    "django_q",
    # django-axes, as the console's "Logins" app (gateway/console/apps.py): failed logins recorded,
    # a username locked out from an address after too many (the AXES_ settings below).
    "gateway.console.apps.LoginsConfig",
    "ledger",
    "pipelines",
    "gateway",
]

MIDDLEWARE = [
    # Outermost: frees each request's objects as its response closes, not at the collector's next
    # pass, which stops every thread of the worker (gateway/http/cycles.py).
    "gateway.http.cycles.ReleaseAtClose",
    # Before anything that answers: a CORS preflight is answered here, before authentication, and
    # every answer to a listed origin (a 401 too) carries its headers (gateway/http/cors.py).
    "corsheaders.middleware.CorsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # A Content-Security-Policy on every HTML page (gateway/http/csp.py): scripts from this origin only.
    "gateway.http.csp.content_security_policy",
    # Static files (the admin's, the console's) are served by the gateway itself, from STATIC_ROOT
    # as collected at set-up: compressed, with far-future caching of the hashed names.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: turns a login refused for a lockout into the page that says so.
    "axes.middleware.AxesMiddleware",
]

# CORS as the original's API answers it: for the origins `api.allowed_origins` lists (read from
# the running config by gateway/http/cors.py, so a reload changes them), with credentials, these
# methods and headers, `Link` exposed, and preflights cached for 5 minutes. No route matches the
# regex: only that check turns CORS on.
CORS_URLS_REGEX = r"^$"
CORS_ALLOW_CREDENTIALS = True
CORS_ALLOW_METHODS = ("GET", "POST", "PUT", "DELETE", "OPTIONS")
CORS_ALLOW_HEADERS = ("Accept", "Authorization", "Content-Type", "X-CSRF-Token")
CORS_EXPOSE_HEADERS = ("Link",)
CORS_PREFLIGHT_MAX_AGE = 300

ROOT_URLCONF = "ductile_site.urls"
WSGI_APPLICATION = "ductile_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "gateway.http.context.gateway",
            ],
        },
    },
]

# SQLite settings that keep "database is locked" away from users: WAL so readers never block
# the writer, IMMEDIATE transactions so a transaction takes the write lock up front instead of
# failing on upgrade, and a generous busy timeout so writers queue instead of erroring.
# The automatic checkpoint is a backstop: `runworkers` and the API's workers checkpoint off the
# commit path (gateway/storage/checkpoints.py), and a checkpoint inside a COMMIT holds the write
# gate. While a `runworkers` of the host does, the other processes' write connections raise it to
# ledger.writes.autocheckpoint.BESIDE_CHECKPOINTER_PAGES; this is for writes no daemon follows.
WAL_AUTOCHECKPOINT_PAGES = 4000
SQLITE_OPTIONS: dict[str, Any] = {
    "init_command": "PRAGMA journal_mode=WAL;PRAGMA synchronous=NORMAL;PRAGMA foreign_keys=ON;"
    f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}",
    "transaction_mode": "IMMEDIATE",
    "timeout": 30,
}


def _database() -> dict[str, Any]:
    url = os.environ.get("DATABASE_URL")
    if url:
        db: dict[str, Any] = dict(dj_database_url.parse(url, conn_max_age=None))
    else:
        # No path when the config could not be loaded: the backend then refuses to connect and says
        # why, instead of creating a stray database somewhere else (gateway/storage/sqlite3/base.py).
        db = {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("DUCTILE_DB_PATH", ""),
            "CONN_MAX_AGE": None,
        }
    if db["ENGINE"] == "django.db.backends.sqlite3":
        # Creates the state directory and the file with private modes, and refuses a missing path.
        db["ENGINE"] = "gateway.storage.sqlite3"
        db.setdefault("OPTIONS", {}).update(SQLITE_OPTIONS)
        db["TEST"] = {"NAME": os.environ.get("DUCTILE_TEST_SQLITE_PATH") or None}
    return db


DATABASES = {"default": _database()}
# `system migrate-ledger` (gateway/operations/ledger_move.py) starts itself again with the SQLite
# ledger it copies named here, beside the PostgreSQL database it copies into (DATABASE_URL).
LEDGER_SOURCE = "ledger_source"
if os.environ.get("DUCTILE_LEDGER_SOURCE"):
    DATABASES[LEDGER_SOURCE] = {
        "ENGINE": "gateway.storage.sqlite3",
        "NAME": os.environ["DUCTILE_LEDGER_SOURCE"],
        "CONN_MAX_AGE": None,
        "OPTIONS": dict(SQLITE_OPTIONS),
    }
# `dumpdata`/`loaddata` JSON lines keep timestamps to the microsecond: backups of a PostgreSQL
# ledger are exported in this format (gateway/operations/backups/jsonlines.py).
SERIALIZATION_MODULES = {"jsonl": "gateway.operations.backups.jsonlines"}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# Timestamps on pages in the ledger's own order and precision (ductile_site/formats/en/formats.py).
FORMAT_MODULE_PATH = ["ductile_site.formats"]

STATIC_URL = "static/"
# Filled by `collectstatic` at set-up (scripts/_env.sh); WhiteNoise serves it.
STATIC_ROOT = Path(os.environ.get("DUCTILE_STATIC_ROOT") or BASE_DIR / ".static")
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "gateway.http.staticfiles.StaticFilesStorage"},
}

# The admin's logins: Django's standard password rules (`ductile admin create-user`, the demo).
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": f"django.contrib.auth.password_validation.{name}"}
    for name in (
        "UserAttributeSimilarityValidator",
        "MinimumLengthValidator",
        "CommonPasswordValidator",
        "NumericPasswordValidator",
    )
]
LOGIN_URL = "admin:login"
# Where a login without `next` lands: the console (Django's default, /accounts/profile/, is no page here).
LOGIN_REDIRECT_URL = "admin:index"
# django-axes' backend first: a locked-out username+address is refused before its password is checked.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]

# The console's door (docs/security.md). After AXES_FAILURE_LIMIT failed logins for one username from
# one address within AXES_COOLOFF_TIME, that pair is refused (429, with why and for how long) until
# the cool-off has passed since its last attempt; other addresses, and other names, are not. A
# success clears the pair's count. Every failure is a row of the console's failed-login list and a
# JSON log line (gateway/console/logins.py); `ductile admin unlock NAME` or the console lifts a lockout.
AXES_FAILURE_LIMIT = 5
AXES_COOLOFF_TIME = timedelta(minutes=15)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_ENABLE_ACCESS_FAILURE_LOG = True
AXES_HANDLER = "gateway.console.logins.LoggingHandler"
AXES_LOCKOUT_CALLABLE = "gateway.console.logins.locked_out"
AXES_CLIENT_IP_CALLABLE = "gateway.http.clients.client_address"
# The console registers its own pages for axes' tables (gateway/console/admin/logins.py), read-only.
AXES_ENABLE_ADMIN = False
# axes' own lines are plain text; ours are the JSON lines of gateway.logs.
AXES_VERBOSE = False


# The addresses of reverse proxies whose X-Forwarded-For is believed (comma-separated addresses or
# networks: "127.0.0.1,10.0.0.0/8"). Unset, a client's address is the connection's (REMOTE_ADDR),
# which a client cannot forge; behind a proxy that is the proxy's, so every client would share it.
def _networks(variable: str) -> list[str]:
    names = [n.strip() for n in os.environ.get(variable, "").split(",") if n.strip()]
    for name in names:
        try:
            ipaddress.ip_network(name, strict=False)
        except ValueError as exc:
            raise ImproperlyConfigured(f"{variable}: {name!r} is not an address or network ({exc})") from exc
    return names


TRUSTED_PROXIES = _networks("DUCTILE_TRUSTED_PROXIES")

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": ["gateway.http.api.auth.BearerAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["gateway.http.api.auth.Scoped"],
    "EXCEPTION_HANDLER": "gateway.http.api.errors.api_exception_handler",
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "DEFAULT_PARSER_CLASSES": ["gateway.http.api.parsers.JSONParser"],
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Ductile Gateway",
    "VERSION": "0.1.0",
    "OAS_VERSION": "3.1.0",
}

# django-q2 runs housekeeping (gateway/operations/housekeeping.py) on its ORM broker in the gateway's own
# database, as `manage.py qcluster` under `system start`. One worker: the tasks are rare and
# batched. A failed or timed-out run is not retried (the next scheduled run is the retry), and a
# schedule missed while the cluster was down runs once, not once per missed interval.
Q_CLUSTER: dict[str, Any] = {
    "name": "ductile-housekeeping",
    "orm": "default",
    "workers": 1,
    "poll": 2.0,
    "timeout": 3600,  # a backup of a large database (VACUUM INTO, then gzip) takes minutes, not hours
    "retry": 3660,  # must exceed timeout: a running task is never handed out twice
    "max_attempts": 1,
    "ack_failures": True,
    "save_limit": 100,
    "catch_up": False,
    "label": "Housekeeping",
}

# Our own JSON log lines go to stdout (gateway.logs); Django's are routed the same way.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "gateway.logs.JsonFormatter"}},
    "filters": {"raised": {"()": "gateway.logs.RaisedOnly"}},
    "handlers": {"stdout": {"class": "logging.StreamHandler", "stream": "ext://sys.stdout", "formatter": "json"}},
    "loggers": {
        "ductile": {"handlers": ["stdout"], "level": "INFO", "propagate": False},
        "django-q": {"handlers": ["stdout"], "level": "WARNING", "propagate": False},
        # django-axes writes a plain-text WARNING per failed login; ours is a JSON line with its
        # fields (gateway/console/logins.py). Its errors still reach the log.
        "axes": {"handlers": ["stdout"], "level": "ERROR", "propagate": False},
        # A request that raised outside the API's own handler (a console page): its exception, in
        # our log. Django's default sends it to the admins' mail, here nowhere. Only what raised:
        # the API's 5xx answers are logged by its handlers with why (gateway/http/api/errors.py).
        "django.request": {"handlers": ["stdout"], "level": "ERROR", "filters": ["raised"], "propagate": False},
    },
}
