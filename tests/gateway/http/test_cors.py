"""CORS as the original's API answers it (`api.allowed_origins`): a listed origin's preflight is
answered before any token is asked for, and every answer to it carries the CORS headers (a 401
too, so the page can read why); any other origin, the console's pages and the webhook listener
get none; the list is the running config's, so a reload changes it; an entry a browser's
`Origin` could never equal is refused with how to write it."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings

from gateway.config.errors import ConfigError
from tests.support.config_dirs import ConfigDir
from tests.support.runtime import installed_runtime, load_runtime

# Real commits: the live server answers from a thread of its own, on its own connection.
pytestmark = [pytest.mark.django_db(transaction=True)]

APP = "http://app.example:5173"
PREFLIGHT = {"Origin": APP, "Access-Control-Request-Method": "POST"}


@pytest.fixture
def api(config_dir: ConfigDir):
    config_dir.extra["api"] = {
        "enabled": True,
        "allowed_origins": [APP, ""],  # an empty entry is ignored, as the original ignores it
        "auth": {"tokens": [{"name": "admin", "token": "tok-admin", "scopes": ["*"]}]},
    }
    with installed_runtime(config_dir):
        yield Client()


def cors_headers(response) -> dict[str, str]:
    return {k.lower(): v for k, v in response.headers.items() if k.lower().startswith("access-control-")}


def test_a_listed_origins_preflight_is_answered_before_any_token(api):
    response = api.options(
        "/plugin/echo/poll", headers={**PREFLIGHT, "Access-Control-Request-Headers": "authorization"}
    )
    assert response.status_code == 200
    assert cors_headers(response) == {
        "access-control-allow-origin": APP,
        "access-control-allow-credentials": "true",
        "access-control-expose-headers": "Link",
        "access-control-allow-methods": "GET, POST, PUT, DELETE, OPTIONS",
        "access-control-allow-headers": "Accept, Authorization, Content-Type, X-CSRF-Token",
        "access-control-max-age": "300",
    }
    assert "origin" in response["Vary"].lower()


def test_every_answer_to_a_listed_origin_carries_the_headers_a_refusal_too(api):
    allowed = api.get("/jobs", HTTP_ORIGIN=APP, HTTP_AUTHORIZATION="Bearer tok-admin")
    assert allowed.status_code == 200 and allowed["Access-Control-Allow-Origin"] == APP
    assert allowed["Access-Control-Allow-Credentials"] == "true" and allowed["Access-Control-Expose-Headers"] == "Link"
    refused = api.get("/jobs", HTTP_ORIGIN=APP)
    assert refused.status_code == 401 and refused["Access-Control-Allow-Origin"] == APP


@pytest.mark.parametrize("origin", ["http://evil.example", "http://app.example:5174", "https://app.example:5173"])
def test_any_other_origin_gets_no_cors_header_and_its_preflight_meets_the_token_check(api, origin):
    preflight = api.options("/jobs", HTTP_ORIGIN=origin, HTTP_ACCESS_CONTROL_REQUEST_METHOD="GET")
    assert preflight.status_code == 401 and cors_headers(preflight) == {}
    assert cors_headers(api.get("/healthz", HTTP_ORIGIN=origin)) == {}


def test_the_consoles_pages_share_nothing_even_with_a_listed_origin(api):
    for path in ("/admin/login/", "/dashboard/"):
        assert cors_headers(api.get(path, HTTP_ORIGIN=APP)) == {}, path
        assert cors_headers(api.options(path, headers=PREFLIGHT)) == {}, path


def test_the_webhook_listener_answers_no_cors(api):
    """Its senders are servers, not pages: the original's listener has no CORS either."""
    from ductile_site import settings_webhooks

    with override_settings(ROOT_URLCONF=settings_webhooks.ROOT_URLCONF, MIDDLEWARE=settings_webhooks.MIDDLEWARE):
        response = api.get("/healthz", HTTP_ORIGIN=APP)
        assert response.status_code == 200 and cors_headers(response) == {}


def test_without_allowed_origins_nothing_is_shared_and_a_reload_changes_the_list(config_dir: ConfigDir):
    config_dir.extra["api"] = {"enabled": True, "auth": {"tokens": [{"name": "a", "token": "tok-a", "scopes": ["*"]}]}}
    with installed_runtime(config_dir):
        client = Client()
        preflight = client.options("/jobs", headers=PREFLIGHT)
        assert preflight.status_code == 401 and cors_headers(preflight) == {}  # what the gap audit met
        config_dir.extra["api"]["allowed_origins"] = [APP]
        load_runtime(config_dir)  # what a reload installs
        assert client.options("/jobs", headers=PREFLIGHT)["Access-Control-Allow-Origin"] == APP


@pytest.mark.parametrize("entry", ["https://app.example.com/", "app.example.com", "https://app.example.com/path", "*"])
def test_an_origin_no_browser_could_send_is_refused_naming_the_key(config_dir: ConfigDir, entry):
    config_dir.extra["api"] = {"enabled": True, "allowed_origins": ["https://ok.example", entry]}
    with pytest.raises(ConfigError) as caught, installed_runtime(config_dir):
        pass
    (problem,) = caught.value.problems
    assert problem.key == "api.allowed_origins[1]" and "such as https://app.example.com" in problem.message
