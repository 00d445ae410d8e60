"""What the audit console's tests run on: a two-step pipeline of real test plugins (probe echoes
its request; noisy talks on stderr, emits an event, writes a fact, fails on request) carrying
secrets in three places, so every page can be checked for them."""

from __future__ import annotations

from django.apps import apps as django_apps

from ledger.roles import grant_actions, grant_login_records, grant_views
from tests.support.config_dirs import ConfigDir

PASSWORD = "correct horse battery"


def console_roles() -> None:
    """The console's groups and their permissions. They come from data migrations (0006, 0008),
    which a transactional test's flush empties for the tests after it: made again by the same code."""
    grant_views(django_apps)
    grant_actions(django_apps)
    grant_login_records(django_apps)


CONFIG_SECRET = "sk-live-0a1b2c3d4e5f"  # noisy's api_key in config.yaml
PAYLOAD_SECRET = "tok-payload-9f8e7d6c"  # carried in a payload under a secret-like key
EVENT_SECRET = "from-the-event-111111"  # emitted by noisy under `api_token`
PIPELINES = [
    {
        "name": "audit",
        "on": "audit.start",
        "steps": [
            {
                "id": "greet",
                "uses": "probe",
                "baggage": {"origin.user": "payload.user", "origin.auth_token": "payload.auth_token"},
            },
            {"id": "shout", "uses": "noisy"},
        ],
    }
]


def audit_config(cfg: ConfigDir) -> ConfigDir:
    cfg.plugins["noisy"] = {"config": {"api_key": CONFIG_SECRET, "greeting": "hi"}, "retry": {"max_attempts": 1}}
    cfg.extra["pipelines"] = PIPELINES
    return cfg


def audit_payload(**extra: object) -> dict[str, object]:
    """The pipeline's trigger: a user, a token, and the config's secret in free text."""
    return {"user": "ada", "auth_token": PAYLOAD_SECRET, "note": f"a copy of {CONFIG_SECRET}", **extra}
