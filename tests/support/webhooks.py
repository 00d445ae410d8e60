"""Webhook test helpers: a config with two signed endpoints, signing, and a real listener process
(gunicorn serving `gateway.http.webhooks.wsgi`) to call over HTTP."""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.checkout import REPO
from tests.support.config_dirs import ConfigDir
from tests.support.processes import cli_env

SECRET = "hook-secret-0123456789"
ENV = {"WEBHOOK_SECRET": SECRET, "OTHER_SECRET": "another-secret"}
TOKENS = """\
tokens:
  - name: github_secret
    key: ${WEBHOOK_SECRET}
  - name: other_secret
    key: ${OTHER_SECRET}
"""
WEBHOOKS = """\
webhooks:
  endpoints:
    - name: github
      path: /webhook/github
      plugin: probe
      secret_ref: github_secret
      signature_header: X-Hub-Signature-256
    - name: small
      path: /webhook/small
      plugin: probe
      command: poll
      secret_ref: other_secret
      signature_header: X-Ductile-Signature-256
      max_body_size: 64B
"""


def sign(body: bytes, secret: str = SECRET) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def write_config(cfg: ConfigDir, webhooks: str = WEBHOOKS, *, listen: str | None = None) -> Path:
    cfg.extra["include"] = ["tokens.yaml", "webhooks.yaml"]
    if listen:
        cfg.extra["webhooks"] = {"listen": listen}
    cfg.file("tokens.yaml", TOKENS)
    cfg.file("webhooks.yaml", webhooks)
    return cfg.write()


HUB = "X-Hub-Signature-256"
DUCTILE = "X-Ductile-Signature-256"


def endpoint(**fields: Any) -> str:
    base = {
        "name": "hook",
        "path": "/hook",
        "plugin": "probe",
        "secret_ref": "github_secret",
        "signature_header": "X-Hub-Signature-256",
    }
    base.update(fields)
    lines = [f"      {k}: {json.dumps(v)}" for k, v in base.items() if v is not None]
    return "webhooks:\n  endpoints:\n    - " + "\n".join(lines).lstrip() + "\n"


WSGI_APP = "gateway.http.webhooks.wsgi:application"


def start_listener(cfg: ConfigDir, port: int) -> subprocess.Popen[str]:
    """gunicorn with the gateway's settings on the listener's WSGI module, on its own port. The
    environment keeps the suite's DJANGO_SETTINGS_MODULE (the API's): the module must override it."""
    config = str(REPO / "ductile_site" / "gunicorn.py")
    return subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", config, "--bind", f"127.0.0.1:{port}", WSGI_APP],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cli_env(cfg, DUCTILE_CONFIG_DIR=str(cfg.path), **ENV),
        cwd=REPO,
    )


def call(port: int, path: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        assert exc.headers["Content-Type"] == "application/json"
        return exc.code, json.loads(exc.read())


def chunked(port: int, path: str, chunks: list[bytes], headers: dict[str, str]) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", path, body=iter(chunks), headers=headers, encode_chunked=True)
        return conn.getresponse().status
    finally:
        conn.close()


def listener_up(port: int) -> bool:
    """The listener answers /healthz (a refused connection is "not yet")."""
    try:
        return call(port, "/healthz")[0] == 200
    except OSError:
        return False
