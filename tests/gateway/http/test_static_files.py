"""The console's static files: collected when set-up did not, pages that render before they are,
and a page's 500 in the gateway's log."""

from __future__ import annotations

import json
import os

import pytest
from django.test import override_settings
from django.urls import reverse

from gateway.http.static_collection import MANIFEST, collection_needed
from tests.support.config_dirs import ConfigDir
from tests.support.processes import ductile


def test_collection_is_needed_when_nothing_is_collected_or_static_changed_since(tmp_path):
    root, source = tmp_path / "collected", tmp_path / "static"
    (source / "ductile").mkdir(parents=True)
    css = source / "ductile" / "console.css"
    css.write_text("body {}")
    assert collection_needed(root, [source]) == "none were collected"
    root.mkdir()
    (root / MANIFEST).write_text("{}")
    os.utime(css, ns=(1, 1))
    assert collection_needed(root, [source]) is None
    os.utime(css)  # edited after the collection
    assert collection_needed(root, [source]) == f"{css} changed since they were"


@pytest.mark.django_db
def test_a_page_renders_before_the_static_files_are_collected(client, tmp_path):
    # Before: the storage hashed each name by opening the file in STATIC_ROOT and failed the page.
    with override_settings(STATIC_ROOT=tmp_path / "nothing-collected"):
        login = client.get(reverse("admin:login"))
    assert login.status_code == 200
    assert b'id="id_username"' in login.content
    assert b'href="/static/admin/css/base.css"' in login.content  # unhashed: there is no manifest


@pytest.mark.process
def test_a_pages_500_is_in_the_gateways_log_with_its_exception(tmp_path):
    """Django sends a request's error to the admins' mail by default; the gateway has none, so a
    console page that failed left no trace. Now it is a JSON line on stdout, as every other."""
    cfg = ConfigDir(tmp_path / "config")
    cfg.write()
    script = (
        "from unittest import mock\n"
        "from django.contrib.admin.sites import AdminSite\n"
        "from django.test import Client\n"
        "from gateway.http.api.views import Health\n"
        "client = Client(raise_request_exception=False)\n"
        "with mock.patch.object(AdminSite, 'login', side_effect=RuntimeError('boom')):\n"
        "    print('page', client.get('/admin/login/').status_code)\n"
        "with mock.patch.object(Health, 'get', side_effect=RuntimeError('bang')):\n"
        "    print('api', client.get('/healthz').status_code)\n"
    )
    proc = ductile(cfg, "shell", "--no-imports", "-c", script)
    assert proc.returncode == 0, proc.stderr
    assert "page 500" in proc.stdout and "api 500" in proc.stdout
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    page = [line for line in lines if line["component"] == "django.request"]
    assert len(page) == 1 and page[0]["level"] == "ERROR", proc.stdout
    assert "/admin/login/" in page[0]["message"] and "RuntimeError: boom" in page[0]["exception"]
    # The API's handler logs its own 500 with the exception; Django's request log adds no second line.
    api = [line for line in lines if "bang" in line.get("exception", "")]
    assert [line["component"] for line in api] == ["api"], proc.stdout
