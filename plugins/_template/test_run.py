"""Tests for the template plugin: copy them with the directory and adapt them to your plugin.

Standard library only. Run them with `python3 test_run.py` (or `python3 -m pytest test_run.py`).
They drive the plugin the two ways you will:

* by hand, as the gateway does: one JSON request on stdin, one JSON response on stdout, e.g.
      echo '{"command": "health", "config": {}}' | ./run.py
* through the gateway: `ductile plugin run NAME --command poll` on a throwaway config directory
  (skipped when no `ductile` command is found; set DUCTILE_BIN to point at one).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from typing import Any

PLUGIN_DIR = Path(__file__).resolve().parent
RUN = PLUGIN_DIR / "run.py"
# Where run.py finds the stopwatch helper: beside it, else the bundled plugins/_lib/.
STOPWATCH = [PLUGIN_DIR / "_stopwatch.py", PLUGIN_DIR.parent / "_lib" / "_stopwatch.py"]
DUCTILE = os.environ.get("DUCTILE_BIN") or shutil.which("ductile")


def invoke(request: dict[str, Any]) -> dict[str, Any]:
    """`echo REQUEST | ./run.py`: the exit code must be 0 and stdout exactly one JSON document."""
    proc = subprocess.run([str(RUN)], input=json.dumps(request), capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr}"
    return json.loads(proc.stdout)


class ByHand(unittest.TestCase):
    def test_health_and_init_answer_ok(self) -> None:
        for command in ("health", "init"):
            response = invoke({"command": command, "config": {}})
            self.assertEqual(response["status"], "ok")
            self.assertNotIn("state_updates", response)  # neither records state

    def test_poll_counts_on_from_the_state_it_is_given(self) -> None:
        response = invoke({"command": "poll", "config": {"greeting": "Hi"}, "state": {"count": 2}})
        self.assertEqual(response["result"], "poll #3")
        self.assertEqual(set(response["state_updates"]), {"count", "last_run"})
        self.assertEqual(response["state_updates"]["count"], 3)
        [event] = response["events"]
        self.assertEqual(event, {"type": "template.ticked", "payload": {"count": 3, "greeting": "Hi"},
                                 "dedupe_key": "template:tick:3"})

    def test_handle_greets_the_payload_name_else_the_baggage_name(self) -> None:
        by_payload = invoke({"command": "handle", "event": {"payload": {"name": "Ada"}}, "context": {"name": "Bob"}})
        self.assertEqual(by_payload["events"][0]["payload"], {"name": "Ada", "message": "Hello, Ada!"})
        by_context = invoke({"command": "handle", "event": {"payload": {}}, "context": {"name": "Bob"}})
        self.assertEqual(by_context["result"], "Hello, Bob!")

    def test_refusals_are_errors_that_are_not_retried(self) -> None:
        for request, words in [
            ({"command": "handle", "event": {"payload": {}}}, "payload.name is required"),
            ({"command": "health", "config": {"greeting": ""}}, "config.greeting must be a non-empty string"),
            ({"command": "sync"}, "unknown command 'sync'"),
        ]:
            response = invoke(request)
            self.assertEqual((response["status"], response["retry"]), ("error", False), request)
            self.assertIn(words, response["error"])

    @unittest.skipUnless(any(p.is_file() for p in STOPWATCH), "no _stopwatch.py beside run.py or in plugins/_lib/")
    def test_poll_reports_its_sub_spans(self) -> None:
        response = invoke({"command": "poll", "config": {}})
        [span] = response["ductile_stopwatch_subs"]
        self.assertEqual((span["name"], span["count"]), ("template.count", 1))
        self.assertGreaterEqual(span["dur_ns"], 0)


@unittest.skipUnless(DUCTILE, "no `ductile` command on PATH (set DUCTILE_BIN)")
class ThroughTheGateway(unittest.TestCase):
    """`ductile plugin run` on a config directory of the test's own, with its own ledger."""

    def setUp(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="plugin-test-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.name = re.search(r"^name:\s*(\S+)", (PLUGIN_DIR / "manifest.yaml").read_text(), re.M).group(1)
        root = PLUGIN_DIR.parent
        if PLUGIN_DIR.name.startswith("_"):  # the gateway never loads `_` directories: test a copy
            root = self.tmp / "plugins"
            shutil.copytree(PLUGIN_DIR, root / self.name, ignore=shutil.ignore_patterns("__pycache__"))
        self.config = self.tmp / "config"
        self.config.mkdir()
        (self.config / "config.yaml").write_text(
            json.dumps(  # JSON is YAML: no YAML library needed
                {
                    "plugin_roots": [str(root)],
                    "state": {"path": str(self.tmp / "ductile.db")},
                    "api": {"enabled": False},
                    "plugins": {self.name: {"config": {"greeting": "Hello"}}},
                }
            )
        )
        self.ductile("config", "lock")  # seal the config and fingerprint the plugin, as after any edit

    def ductile(self, *args: str) -> subprocess.CompletedProcess[str]:
        # The config directory names the ledger: variables that would point elsewhere are left out.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DUCTILE_", "DATABASE_URL"))}
        return subprocess.run([DUCTILE, *args, "--config-dir", str(self.config)], capture_output=True, text=True,
                              env=env, timeout=120)

    def run_plugin(self, *args: str) -> dict[str, Any]:
        proc = self.ductile("plugin", "run", self.name, *args, "--json")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        return json.loads(proc.stdout)

    def test_poll_records_its_count_and_the_next_poll_reads_it_back(self) -> None:
        first = self.run_plugin("--command", "poll")
        self.assertEqual((first["status"], first["result"]["result"]), ("succeeded", "poll #1"))
        second = self.run_plugin("--command", "poll")
        self.assertEqual(second["result"]["state_updates"]["count"], 2)  # request.state held the first snapshot

    def test_handle_and_health(self) -> None:
        handled = self.run_plugin("--command", "handle", "--payload", '{"name": "Ada"}')
        self.assertEqual(handled["result"]["result"], "Hello, Ada!")
        self.assertEqual(self.run_plugin("--command", "health")["status"], "succeeded")


if __name__ == "__main__":
    unittest.main()
