"""Where a person auditing plugins sees their sandboxes (issue 39): the profile each attempt ran
under and the hosts an egress plugin asked for, on the console's job page, in `job inspect` (text
and --json), summed per plugin (`plugin list`, the console's config page); and `system doctor`
naming a plugin left on the host's network and filesystem under `sandbox_default: strict`."""

from __future__ import annotations

import html
import io
import json
import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.core.management import call_command
from django.urls import reverse

from gateway.config.sandbox import physical_memory, size_text
from gateway.operations.doctor import diagnose
from tests.gateway.console.test_console import job_url, person, text
from tests.gateway.execution.test_sandbox_isolation import Hello
from tests.support.config_dirs import ConfigDir
from tests.support.jobs import run_job
from tests.support.network import http_server
from tests.support.runtime import load_runtime

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

PROFILE = f"filesystem=host limits=memory:{size_text(physical_memory())},cpu:3600s,files:8192,fsize:32GB,nproc:4096"


@pytest.fixture
def servers() -> Iterator[tuple[str, str]]:
    with http_server(Hello) as allowed, http_server(Hello) as other:
        yield f"127.0.0.1:{allowed}", f"127.0.0.1:{other}"


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root (CI has it)")
def test_the_profile_and_the_egress_hosts_are_shown_on_the_job_page_in_job_inspect_and_per_plugin(
    config_dir: ConfigDir, servers: tuple[str, str]
) -> None:
    allowed, other = servers
    config_dir.plugins["intruder"] = {"retry": {"max_attempts": 1}, "sandbox": {"egress": [allowed]}}
    holder = load_runtime(config_dir)
    urls = [f"http://{allowed}/", f"http://{other}/"]
    job = run_job(holder, "intruder", payload={"try": "fetch_each", "urls": urls})
    profile = f"network=egress[{allowed}] {PROFILE}"

    out = io.StringIO()
    call_command("job", "inspect", job.id, "--json", stdout=out)
    inspected = json.loads(out.getvalue())
    assert [a["sandbox"] for a in inspected["job_attempts"]] == [profile]
    assert inspected["egress"] == [
        {"attempt": 1, "host": allowed, "verdict": "allowed", "requests": 1},
        {"attempt": 1, "host": other, "verdict": "refused", "requests": 1},
    ]
    out = io.StringIO()
    call_command("job", "inspect", job.id, stdout=out)
    assert f"  sandbox: {profile}\n  egress: {allowed} allowed (1 request)\n  egress: {other} refused (1 request)" in (
        out.getvalue()
    )

    auditor = person("auditor", "ada")
    page = html.unescape(text(auditor.get(job_url(job.id))))
    assert f"sandbox <code>{profile}</code>" in page
    assert f"<td><code>{other}</code></td><td>refused</td><td>1</td>" in page

    run_job(holder, "intruder", payload={"try": "fetch_each", "urls": urls})
    page = html.unescape(text(auditor.get(reverse("admin:config"))))
    assert f"sandbox <code>{profile}</code>" in page
    assert f"<code>{allowed}</code> allowed: 2 requests by 2 jobs" in page
    out = io.StringIO()
    call_command("plugin", "list", "--json", stdout=out)
    [row] = [r for r in json.loads(out.getvalue())["plugins"] if r["name"] == "intruder"]
    assert row["sandbox"] == profile
    assert sorted((e["host"], e["verdict"], e["requests"], e["jobs"]) for e in row["egress"]) == sorted(
        [(allowed, "allowed", 2, 2), (other, "refused", 2, 2)]
    )
    assert urlsplit(urls[0]).netloc == allowed


def findings(config_dir: ConfigDir) -> list[Any]:
    return diagnose(load_runtime(config_dir).get())


def test_doctor_names_a_plugin_left_on_the_hosts_network_and_filesystem_under_a_strict_default(
    config_dir: ConfigDir,
) -> None:
    config_dir.plugins["stress"]["sandbox"] = {"network": "host", "filesystem": "host"}
    assert not [f for f in findings(config_dir) if f.check == "sandbox_host_under_strict"]
    config_dir.service["sandbox_default"] = "strict"
    if os.geteuid() != 0:
        pytest.skip("a strict default needs root to load its plugins (CI has it)")
    [finding] = [f for f in findings(config_dir) if f.check == "sandbox_host_under_strict"]
    assert finding.severity == "warning" and finding.key == "plugins.stress.sandbox"
    assert finding.message == (
        "plugin 'stress' runs with the host's network and filesystem while service.sandbox_default is strict: "
        "its own sandbox: says so"
    )
