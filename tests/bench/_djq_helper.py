"""django-q2 side of bench_throughput.py: `enqueue N ENTRYPOINT` (request bytes on stdin).

Run with DJANGO_SETTINGS_MODULE=djq_settings and BENCH_DJQ_DB set; prints one JSON line.
"""

from __future__ import annotations

import json
import sys
import time

import django

django.setup()

from django_q.tasks import async_task  # noqa: E402

if __name__ == "__main__":
    action, count, entrypoint = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    request = sys.stdin.buffer.read()
    assert action == "enqueue"
    started = time.perf_counter()
    for _ in range(count):
        async_task("djq_tasks.run_plugin", entrypoint, request)
    print(json.dumps({"enqueued": count, "seconds": time.perf_counter() - started}))
