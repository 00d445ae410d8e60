"""The API's routes (spec 000 "API Reference")."""

from __future__ import annotations

from django.urls import include, path, re_path

from gateway.http.api import mcp, relay_ingress, views

urlpatterns = [
    path("", include("gateway.http.api.openapi_urls")),
    path("", include("gateway.http.api.ops_urls")),
    path("", views.Root.as_view(), name="root"),
    path("healthz", views.Health.as_view(), name="healthz"),
    path("plugins", views.Plugins.as_view(), name="plugins"),
    path("plugin/<str:name>", views.PluginDetail.as_view(), name="plugin"),
    path("plugin/<str:plugin>/<str:command>", views.PluginTrigger.as_view(), name="plugin-trigger"),
    path("pipeline/<str:name>", views.PipelineTrigger.as_view(), name="pipeline-trigger"),
    path("skills", views.Skills.as_view(), name="skills"),
    path(".well-known/ai-plugin.json", views.AiPlugin.as_view(), name="ai-plugin"),
    path("job/<str:job_id>", views.JobDetail.as_view(), name="job"),
    path("job/<str:job_id>/tree", views.JobTree.as_view(), name="job-tree"),
    path("jobs", views.Jobs.as_view(), name="jobs"),
    path("job-logs", views.JobLogs.as_view(), name="job-logs"),
    path("analytics/queue", views.AnalyticsQueue.as_view(), name="analytics-queue"),
    path("analytics/summary", views.AnalyticsSummary.as_view(), name="analytics-summary"),
    path("mcp", mcp.Mcp.as_view(), name="mcp"),
    path("ingest/peer/<str:peer>", relay_ingress.RelayIngress.as_view(), name="relay-ingress"),
    # Last of every route: a `remote_ingress.listen_path` other than the default; 404 otherwise.
    re_path(r"^(?P<prefix>.+)/(?P<peer>[^/]+)$", relay_ingress.configured_ingress),
]
