"""Operations routes (spec 000 "API Reference" §10, §12; idiom 8 "Diagnostics")."""

from __future__ import annotations

from django.urls import path

from gateway.http.api import ops, watch

urlpatterns = [
    path("config/view", ops.ConfigView.as_view(), name="config-view"),
    path("stopwatch/<str:plugin>", ops.Stopwatch.as_view(), name="stopwatch"),
    path("topology", ops.Topology.as_view(), name="topology"),
    path("scheduler/jobs", ops.SchedulerJobs.as_view(), name="scheduler-jobs"),
    # The name matters: BearerAuthentication accepts `?token=` on the route named "events" only.
    path("events", ops.Events.as_view(), name="events"),
    path("system/reload", ops.SystemReload.as_view(), name="system-reload"),
    path("system/doctor", ops.SystemDoctor.as_view(), name="system-doctor"),
    path("system/nodes", ops.SystemNodes.as_view(), name="system-nodes"),
    path("system/selfcheck", ops.SystemSelfcheck.as_view(), name="system-selfcheck"),
    path("system/watch", watch.SystemWatch.as_view(), name="system-watch"),
]
