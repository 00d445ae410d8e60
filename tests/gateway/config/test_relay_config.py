"""relay-instances.yaml and relay-ingress.yaml as an operator writes them (Configuration
Specification §4.6, §4.7): `config check` names every problem at once with file, line and key, and
a relay step naming an instance that is not there is refused at its `to`. Before, both files
passed `config check` and were ignored."""

from __future__ import annotations

import pytest

from tests.support.config_dirs import ConfigDir
from tests.support.processes import ductile_json

pytestmark = pytest.mark.process

TOKENS = "tokens:\n  - name: relay-lab-v1\n    key: s3cret\n"


def relay_files(config: ConfigDir, instances: str, ingress: str) -> None:
    config.extra["include"] = ["tokens.yaml", "relay-instances.yaml", "relay-ingress.yaml"]
    config.file("tokens.yaml", TOKENS)
    config.file("relay-instances.yaml", instances)
    config.file("relay-ingress.yaml", ingress)
    config.write()


def errors(config: ConfigDir) -> dict[str, tuple[str, int, str]]:
    code, report = ductile_json(config, "config", "check")
    assert code == 78 and report["valid"] is False
    return {e["key"]: (e["file"].rsplit("/", 1)[-1], e["line"], e["message"]) for e in report["errors"]}


def test_every_relay_problem_is_named_with_file_line_and_key(config_dir):
    relay_files(
        config_dir,
        "instances:\n"
        "  - name: lab\n"
        "    base_url: lab.example\n"
        "    ingress_path: /ingest/peer/home\n"
        "    secret_ref: relay-lab-v2\n"
        "  - name: lab\n"
        "    base_url: https://lab2.example\n"
        "    ingress_path: /ingest/peer/home\n"
        "    secret_ref: relay-lab-v1\n",
        "remote_ingress:\n  max_body_size: lots\n  peers:\n    - name: home primary\n      secret_ref: relay-lab-v1\n",
    )
    found = errors(config_dir)
    assert found == {
        "instances[0].base_url": ("relay-instances.yaml", 3, "expected an absolute http(s) URL, got 'lab.example'"),
        "instances[0].secret_ref": (
            "relay-instances.yaml",
            5,
            "secret_ref 'relay-lab-v2': tokens.yaml defines no entry 'relay-lab-v2' with a key",
        ),
        "instances[1].name": ("relay-instances.yaml", 6, "name 'lab' is already used by instances[0]"),
        "remote_ingress.max_body_size": (
            "relay-ingress.yaml",
            2,
            "expected a size such as 1MB, 512KB or 1048576 (bytes), got 'lots'",
        ),
        "remote_ingress.peers[0].name": (
            "relay-ingress.yaml",
            4,
            "expected a name such as home-primary (no /, ?, # or space), got 'home primary'",
        ),
    }


def test_a_relay_step_to_a_disabled_instance_is_refused_at_its_to(config_dir):
    relay_files(
        config_dir,
        "instances:\n"
        "  - name: lab\n"
        "    enabled: false\n"
        "    base_url: https://lab.example\n"
        "    ingress_path: /ingest/peer/home\n"
        "    secret_ref: relay-lab-v1\n",
        "remote_ingress: {}\n",
    )
    config_dir.extra["pipelines"] = [
        {"name": "ship", "on": "backup.done", "steps": [{"id": "out", "relay": {"to": "lab", "event": "backup.ready"}}]}
    ]
    config_dir.write()
    (file, _, message) = errors(config_dir)["pipelines[0].steps[0].relay.to"]
    assert file == "config.yaml" and message == "unknown relay instance 'lab' (enabled in relay-instances.yaml: none)"


def test_the_keys_of_a_rotation_are_checked_with_file_line_and_key(config_dir):
    # A peer accepts more key ids beside its own during a rotation, each with its own secret.
    relay_files(
        config_dir,
        "instances: []\n",
        "remote_ingress:\n"
        "  peers:\n"
        "    - name: home-primary\n"
        "      secret_ref: relay-lab-v1\n"
        "      keys:\n"
        "        - key_id: v1\n"
        "          secret_ref: relay-lab-v1\n"
        "    - name: lab-two\n"
        "      key_id: v2\n"
        "      secret_ref: relay-lab-v1\n"
        "      keys:\n"
        "        - key_id: v2\n"
        "          secret_ref: relay-lab-v1\n"
        "        - key_id: v1\n"
        "          secret_ref: relay-lab-v0\n"
        "        - key_id: ' '\n"
        "          secret_ref: relay-lab-v1\n",
    )
    assert errors(config_dir) == {
        "remote_ingress.peers[0].keys": (
            "relay-ingress.yaml",
            5,
            "keys: the peer's own key_id must be set too (a request's key id picks its secret)",
        ),
        "remote_ingress.peers[1].keys[0].key_id": (
            "relay-ingress.yaml",
            12,
            "key id 'v2' is already used by remote_ingress.peers[1].key_id",
        ),
        "remote_ingress.peers[1].keys[1].secret_ref": (
            "relay-ingress.yaml",
            15,
            "secret_ref 'relay-lab-v0': tokens.yaml defines no entry 'relay-lab-v0' with a key",
        ),
        "remote_ingress.peers[1].keys[2].key_id": ("relay-ingress.yaml", 16, "expected a key id such as v1"),
    }
