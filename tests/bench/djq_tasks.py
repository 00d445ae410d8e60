"""The django-q2 task of bench_throughput.py: run the plugin once, as the gateway would (stdin in, stdout out)."""

from __future__ import annotations

import subprocess


def run_plugin(entrypoint: str, request: bytes) -> str:
    proc = subprocess.run([entrypoint], input=request, capture_output=True, check=True, timeout=60)
    return proc.stdout.decode()
