"""The bundled `_template`: never loaded as a plugin and never warned about, and its own test
file passes as its README says to run it, through a real `ductile plugin run` included."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.checkout import REPO
from tests.support.processes import ductile_json

pytestmark = pytest.mark.process

TEMPLATE = REPO / "plugins" / "_template"


@pytest.mark.django_db
def test_plugin_list_neither_loads_nor_warns_about_underscore_directories(config_dir):
    config_dir.write()
    code, body = ductile_json(config_dir, "plugin", "list")
    assert code == 0
    assert "template" not in body["discovered_unconfigured"]
    assert not [w for w in body["warnings"] if "/plugins/_" in w]
    assert not [d for d in body["invalid_manifests"] if "/plugins/_" in d["directory"]]


def test_the_templates_own_tests_pass_by_hand_and_through_ductile_plugin_run():
    # The `ductile` this checkout installed, first on PATH, as a plugin author's shell would have it.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(
        [sys.executable, str(TEMPLATE / "test_run.py"), "-v"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=TEMPLATE,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    report = proc.stderr
    assert "Ran 7 tests" in report
    assert "ThroughTheGateway" in report and "skipped 'no `ductile` command" not in report
    # The stopwatch part runs once plugins/_lib/_stopwatch.py exists, and is skipped cleanly before.
    if (REPO / "plugins" / "_lib" / "_stopwatch.py").is_file():
        assert report.rstrip().endswith("OK")
    else:
        assert "skipped 'no _stopwatch.py beside run.py or in plugins/_lib/'" in report
        assert report.rstrip().endswith("OK (skipped=1)")
