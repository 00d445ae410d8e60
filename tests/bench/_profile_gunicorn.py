"""Diagnostic gunicorn config for `bench_api.py --profile` (not an entry point of its own).

The product's own ductile_site/gunicorn.py, plus: in each worker, the clocks of _sections.py
around the write gate, BEGIN, COMMIT, the on_commit pokes, logging and Job.objects.enqueue, and
one tally per request (WSGIHandler.__call__); at the worker's exit, its totals and every
request's tally go to $BENCH_PROFILE_DIR/api-<pid>.json. The product code is not changed.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ductile_site.gunicorn import *  # noqa: F403 - the product's settings, unchanged
from ductile_site.gunicorn import post_worker_init as _product_post_worker_init


def post_worker_init(worker: Any) -> None:
    import sys

    import _sections

    if "BENCH_SWITCH_INTERVAL" in os.environ:  # an experiment: shorter GIL hand-overs
        sys.setswitchinterval(float(os.environ["BENCH_SWITCH_INTERVAL"]))
    from django.core.handlers.wsgi import WSGIHandler

    from ledger.models.jobs import JobQuerySet

    _sections.install_ledger()
    _sections.patch(JobQuerySet, "enqueue", "enqueue (ORM/SQL, excl. gate, BEGIN, COMMIT)")
    call = WSGIHandler.__call__

    def timed_call(self: WSGIHandler, environ: Any, start_response: Any) -> Any:
        with _sections.request():
            return call(self, environ, start_response)

    WSGIHandler.__call__ = timed_call  # type: ignore[method-assign]
    _product_post_worker_init(worker)


def worker_exit(server: Any, worker: Any) -> None:
    import _sections

    path = os.path.join(os.environ["BENCH_PROFILE_DIR"], f"api-{os.getpid()}.json")
    with open(path, "w") as out:
        json.dump(_sections.report(), out)
