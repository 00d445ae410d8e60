"""Benchmarks run on demand (`.venv/bin/python tests/bench/<name>.py`), never in a plain `pytest` run."""

collect_ignore_glob = ["*.py"]
