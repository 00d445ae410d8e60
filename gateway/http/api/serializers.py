"""The API's request and response shapes, for the OpenAPI document (spec 000 "API Reference").

The views build plain dicts (the read models in `gateway.reports` are shared with the CLI); these
serializers only describe those dicts to drf-spectacular, so each field here mirrors the view or
read model named in its class docstring. The schemathesis test in tests/gateway/http/test_openapi.py checks
real responses against them.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, PolymorphicProxySerializer
from rest_framework import serializers

from gateway.intake import DEDUPE_KEY_MAX
from ledger.states import JobStatus

# A JSONField already admits null: `allow_null` on one would make drf-spectacular emit
# `oneOf: [{}, {type: null}]`, which null matches twice and so fails.

# -- errors ------------------------------------------------------------------------------------


class ErrorSerializer(serializers.Serializer):
    """Every error the API answers (`gateway.http.api.errors`)."""

    error = serializers.CharField(help_text="What went wrong and, where it helps, what to do instead.")
    detail = serializers.CharField(
        required=False,
        help_text="404s only: `error` is in the original's words (`job not found`, `plugin not found`, "
        "`pipeline not found`, `command not supported by plugin`), which its clients compare; this says which "
        "one and why.",
    )


class ContextTooLargeSerializer(ErrorSerializer):
    """413 of a pipeline trigger whose entry's baggage claims would pass the context cap."""

    bytes_actual = serializers.IntegerField(help_text="The size the accumulated context would have, in bytes.")
    bytes_limit = serializers.IntegerField(help_text="The cap on a pipeline's accumulated context (1 MiB).")


ERROR_MEANINGS = {
    400: "Bad request: invalid JSON body, payload or query parameter; `error` names it.",
    401: "Bearer token missing (where one is needed), malformed or unknown.",
    403: "The token is valid but lacks the scope this call needs; `error` names the scopes that would do.",
    404: "No such plugin, command, pipeline or job: `error` in the original's words, `detail` naming it.",
    415: "The body is not `application/json`.",
    429: "Too many synchronous callers are already waiting (`api.max_concurrent_sync`); retry later.",
    503: "The database refused the write (unreachable, full, read-only): nothing was recorded, retry after "
    "`Retry-After` seconds. Only when `error` says the connection was lost while recording, it may have been "
    "recorded: look it up before retrying.",
}


def errors(*codes: int, meaning: dict[int, str] | None = None) -> dict[int, OpenApiResponse]:
    """`{"error": …}` responses for `extend_schema(responses=…)`, described once for every view;
    `meaning` for the codes a view means differently."""
    meanings = {**ERROR_MEANINGS, **(meaning or {})}
    return {code: OpenApiResponse(ErrorSerializer, description=meanings[code]) for code in (*codes, *(meaning or ()))}


# -- discovery ---------------------------------------------------------------------------------


class DiscoveryLinksSerializer(serializers.Serializer):
    health = serializers.CharField()
    skills = serializers.CharField()
    plugins = serializers.CharField()
    openapi = serializers.CharField()
    ai_plugin = serializers.CharField()


class RootSerializer(serializers.Serializer):
    """`GET /` (views.Root)."""

    name = serializers.CharField()
    description = serializers.CharField()
    version = serializers.CharField()
    uptime_seconds = serializers.IntegerField()
    discovery = DiscoveryLinksSerializer()


class HealthSerializer(serializers.Serializer):
    """`GET /healthz` (views.Health)."""

    status = serializers.CharField()
    uptime_seconds = serializers.IntegerField()
    queue_depth = serializers.IntegerField(help_text="Jobs queued or running.")
    plugins_loaded = serializers.IntegerField()
    plugins_circuit_open = serializers.IntegerField()
    plugins_unserved = serializers.ListField(
        child=serializers.CharField(),
        help_text="Plugins with queued jobs that no live worker node claims (its group or --plugins leave them "
        "out, or no node is live): they wait until one that serves them runs. Empty when all is served.",
    )
    workers = serializers.IntegerField(help_text="Workers with a fresh heartbeat.")
    config_path = serializers.CharField()
    binary_path = serializers.CharField(
        help_text="The command the gateway runs as: the `ductile` script (or manage.py) `system start` was "
        "started with; the original reports its executable here."
    )
    version = serializers.CharField()


class PluginSummarySerializer(serializers.Serializer):
    name = serializers.CharField()
    version = serializers.CharField()
    description = serializers.CharField()
    commands = serializers.ListField(child=serializers.CharField())


class PluginListSerializer(serializers.Serializer):
    """`GET /plugins` (views.Plugins)."""

    plugins = PluginSummarySerializer(many=True)


class CommandSerializer(serializers.Serializer):
    name = serializers.CharField()
    type = serializers.ChoiceField(["read", "write"], help_text="`read` needs an `ro` scope, `write` an `rw` one.")
    description = serializers.CharField()
    input_schema = serializers.JSONField(
        help_text="As the manifest declares it (JSON Schema or the compact `field: type` map), or null."
    )
    output_schema = serializers.JSONField(help_text="As the manifest declares it, or null.")


class PluginDetailSerializer(serializers.Serializer):
    """`GET /plugin/{name}` (views.PluginDetail)."""

    name = serializers.CharField()
    uses = serializers.CharField(help_text="The plugin this instance runs (its own name unless it is an alias).")
    version = serializers.CharField()
    description = serializers.CharField()
    protocol = serializers.IntegerField()
    commands = CommandSerializer(many=True)


class PluginSkillSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="`plugin.{plugin}.{command}`")
    kind = serializers.CharField(help_text="`plugin`")
    description = serializers.CharField()
    endpoint = serializers.CharField(help_text="POST here to invoke it.")
    tier = serializers.ChoiceField(["READ", "WRITE"])
    plugin = serializers.CharField()
    command = serializers.CharField()
    scopes = serializers.ListField(child=serializers.CharField(), help_text="Any one of these invokes it.")
    mutates_state = serializers.BooleanField(help_text="A `write` command: it changes external state.")
    idempotent = serializers.BooleanField(help_text="The manifest's hint; left out, true for `read` commands.")
    retry_safe = serializers.BooleanField(help_text="The manifest's hint; left out, true for `read` commands.")
    input_schema = serializers.JSONField(
        help_text="The `payload` as JSON Schema (the manifest's compact form expanded); null: none declared."
    )


class PipelineStepSerializer(serializers.Serializer):
    id = serializers.CharField()
    plugin = serializers.CharField()
    command = serializers.CharField()
    after = serializers.ListField(child=serializers.CharField(), help_text="Steps whose finish starts this one.")
    # `if` is a keyword: the field goes into the class namespace by name.
    locals()["if"] = serializers.JSONField(required=False, help_text="The step runs only when this holds.")


class PipelineSkillSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="`pipeline.{name}`")
    kind = serializers.CharField(help_text="`pipeline`")
    endpoint = serializers.CharField(help_text="POST here to start it.")
    pipeline = serializers.CharField()
    trigger = serializers.CharField(help_text="The event type that starts it.")
    execution_mode = serializers.ChoiceField(["synchronous", "asynchronous"])
    timeout_secs = serializers.FloatField()
    scopes = serializers.ListField(child=serializers.CharField())
    entry_steps = serializers.ListField(child=serializers.CharField(), help_text="The steps a start runs first.")
    steps = PipelineStepSerializer(many=True)
    locals()["if"] = serializers.JSONField(required=False, help_text="The pipeline starts only when this holds.")


class SkillListSerializer(serializers.Serializer):
    """`GET /skills` (views.Skills)."""

    skills = serializers.ListField(
        child=PolymorphicProxySerializer(
            component_name="Skill",
            serializers={"plugin": PluginSkillSerializer, "pipeline": PipelineSkillSerializer},
            resource_type_field_name="kind",
        )
    )


class AiPluginAuthSerializer(serializers.Serializer):
    type = serializers.CharField()


class AiPluginApiSerializer(serializers.Serializer):
    type = serializers.CharField()
    url = serializers.CharField()


class AiPluginSerializer(serializers.Serializer):
    """`GET /.well-known/ai-plugin.json` (views.AiPlugin)."""

    schema_version = serializers.CharField()
    name_for_human = serializers.CharField()
    name_for_model = serializers.CharField()
    description_for_human = serializers.CharField()
    description_for_model = serializers.CharField()
    auth = AiPluginAuthSerializer()
    api = AiPluginApiSerializer()


# -- triggers ----------------------------------------------------------------------------------


# The column's width: a longer key is refused with 400 (PostgreSQL would fail the insert).
DEDUPE_KEY_HELP = (
    "While a job for this plugin and command holds the key (service.dedupe_ttl), the call answers that job "
    "instead of enqueuing another."
)


class PipelineTriggerRequestSerializer(serializers.Serializer):
    """`POST /pipeline/{name}` body (views.body_payload). An empty body is `{}`."""

    payload = serializers.DictField(
        required=False, allow_null=True, help_text="The event payload; absent or null means `{}`."
    )


class PluginTriggerRequestSerializer(PipelineTriggerRequestSerializer):
    """`POST /plugin/{plugin}/{command}` body (views.PluginTrigger)."""

    dedupe_key = serializers.CharField(
        required=False, allow_null=True, max_length=DEDUPE_KEY_MAX, help_text=DEDUPE_KEY_HELP
    )


class TriggerAcceptedSerializer(serializers.Serializer):
    """202 of `POST /plugin/{plugin}/{command}` (views.PluginTrigger)."""

    job_id = serializers.CharField()
    status = serializers.CharField(help_text="`queued`, or the earlier job's status when deduplicated")
    plugin = serializers.CharField()
    command = serializers.CharField()
    deduplicated = serializers.BooleanField(
        required=False, help_text="Present (true) when `job_id` is the earlier job."
    )


class PipelineQueuedSerializer(serializers.Serializer):
    """202 of an asynchronous `POST /pipeline/{name}` (views.PipelineTrigger)."""

    job_id = serializers.CharField(allow_null=True, help_text="The first root job; null when no entry step ran.")
    job_ids = serializers.ListField(child=serializers.CharField(), help_text="Every root job the pipeline started.")
    status = serializers.CharField(help_text="`queued`")
    plugin = serializers.CharField(help_text="`pipeline`")
    command = serializers.CharField(help_text="The pipeline's name.")


# -- jobs --------------------------------------------------------------------------------------


RESULT_CLASS = "Absent unless the token has `jobs:result:ro` (`jobs:ro`, `jobs:rw` and `*` grant it)."


class JobSerializer(serializers.Serializer):
    """`reports.job_summary` plus the latest attempt's result: `GET /job/{id}` and each tree hop."""

    job_id = serializers.CharField()
    plugin = serializers.CharField()
    command = serializers.CharField()
    status = serializers.ChoiceField(JobStatus.choices)
    attempt = serializers.IntegerField()
    max_attempts = serializers.IntegerField()
    submitted_by = serializers.CharField()
    dedupe_key = serializers.CharField(allow_null=True)
    parent_job_id = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    completed_at = serializers.DateTimeField(allow_null=True)
    next_retry_at = serializers.DateTimeField(allow_null=True)
    last_error = serializers.CharField(allow_null=True, required=False, help_text=RESULT_CLASS)
    result = serializers.JSONField(
        required=False, help_text="The plugin's response of the latest attempt, or null. " + RESULT_CLASS
    )


class PipelineRunSerializer(serializers.Serializer):
    """A synchronous `POST /pipeline/{name}` (`trees.TreeOutcome.report`): 200 when the tree
    finished, 202 with `timeout_exceeded` when it was still running at the timeout."""

    job_id = serializers.CharField(allow_null=True)
    job_ids = serializers.ListField(child=serializers.CharField())
    status = serializers.ChoiceField(
        JobStatus.choices, help_text="`running` until complete; then the first job that did not succeed decides."
    )
    duration_ms = serializers.IntegerField()
    result = serializers.JSONField(help_text="The terminal step's result, or null.")
    tree = JobSerializer(many=True)
    timeout_exceeded = serializers.BooleanField(required=False)
    message = serializers.CharField(
        required=False,
        help_text="With `timeout_exceeded`: the pipeline still runs; or, when the database could not be read "
        "until the timeout, that its jobs are started and how to follow them (`tree` is then empty).",
    )


class JobListItemSerializer(serializers.Serializer):
    job_id = serializers.CharField()
    plugin = serializers.CharField()
    command = serializers.CharField()
    status = serializers.ChoiceField(JobStatus.choices)
    attempt = serializers.IntegerField()
    submitted_by = serializers.CharField()
    parent_job_id = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    completed_at = serializers.DateTimeField(allow_null=True)


class JobListSerializer(serializers.Serializer):
    """`GET /jobs` (views.Jobs)."""

    jobs = JobListItemSerializer(many=True)
    total = serializers.IntegerField(help_text="Jobs matching the filters, before `limit`.")


class JobLogEntrySerializer(serializers.Serializer):
    """`reports.log_entry`: one finished attempt."""

    log_id = serializers.CharField()
    job_id = serializers.CharField()
    plugin = serializers.CharField()
    command = serializers.CharField()
    status = serializers.ChoiceField(JobStatus.choices)
    attempt = serializers.IntegerField()
    submitted_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    completed_at = serializers.DateTimeField()
    last_error = serializers.CharField(allow_null=True, required=False, help_text=RESULT_CLASS)
    stderr = serializers.CharField(allow_null=True, required=False, help_text=RESULT_CLASS)
    parent_job_id = serializers.CharField(allow_null=True)
    source_event_id = serializers.CharField(allow_null=True)
    result = serializers.JSONField(
        required=False, help_text="Only with `include_result=true`; may be null. " + RESULT_CLASS
    )


class JobLogListSerializer(serializers.Serializer):
    """`GET /job-logs` (views.JobLogs)."""

    logs = JobLogEntrySerializer(many=True)
    total = serializers.IntegerField(help_text="Attempts matching the filters, before `limit`.")


# -- analytics ---------------------------------------------------------------------------------


class WorkerSerializer(serializers.Serializer):
    id = serializers.CharField()
    hostname = serializers.CharField()
    pid = serializers.IntegerField()
    threads = serializers.IntegerField()
    plugins = serializers.CharField(help_text="The worker group's plugin filter; `*` for every plugin.")
    started_at = serializers.DateTimeField()
    heartbeat_at = serializers.DateTimeField()


class QueueStatusSerializer(serializers.Serializer):
    """`GET /analytics/queue` (`reports.queue_status`)."""

    queue = serializers.DictField(child=serializers.IntegerField(), help_text="Jobs per status.")
    queue_depth = serializers.IntegerField()
    retry_waiting = serializers.IntegerField(help_text="Queued jobs waiting for their retry time.")
    workers = WorkerSerializer(many=True)


class NodeSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="The process's id, `host:pid:random`: what a worker's claimed jobs name.")
    hostname = serializers.CharField()
    pid = serializers.IntegerField()
    roles = serializers.ListField(
        child=serializers.ChoiceField(["api", "workers", "scheduler", "housekeeping"]),
        help_text="What the process runs: `workers` for a worker daemon (runworkers, or the one `system start` "
        "runs); a `system start` supervisor's own roles (`api`: its listeners, `scheduler`, `housekeeping`); "
        "`scheduler` for a standalone runscheduler. Only `workers` claims jobs.",
    )
    group = serializers.CharField(allow_null=True, help_text="Its group of `service.worker_groups`; null for none.")
    plugins = serializers.ListField(
        child=serializers.CharField(),
        allow_null=True,
        help_text="The plugins it claims (its group's, or its --plugins); null for every plugin; empty for a node "
        "that claims no jobs (no `workers` role).",
    )
    version = serializers.CharField(allow_null=True, help_text="The gateway's version it runs.")
    slots = serializers.IntegerField(help_text="Plugin processes it runs at once (its worker threads).")
    state = serializers.ChoiceField(["running", "lost"], help_text="Its row's state.")
    liveness = serializers.ChoiceField(
        ["live", "lost"],
        help_text="live: heard from within a lease (`service.lease_ttl`); lost: silent for longer (its jobs are "
        "taken over) or found dead on its host.",
    )
    started_at = serializers.DateTimeField()
    heartbeat_at = serializers.DateTimeField()


class UnservedSerializer(serializers.Serializer):
    plugin = serializers.CharField()
    queued = serializers.IntegerField(help_text="Its queued jobs.")
    oldest_queued_at = serializers.DateTimeField(help_text="When the oldest of them was enqueued.")


class NodesSerializer(serializers.Serializer):
    """`GET /system/nodes` (ops.SystemNodes)."""

    nodes = NodeSerializer(many=True, help_text="Live nodes, then lost ones heard from within a day.")
    live = serializers.IntegerField()
    lost = serializers.IntegerField()
    unserved = UnservedSerializer(many=True, help_text="Plugins with queued jobs that no live node claims.")


class SummarySerializer(serializers.Serializer):
    """`GET /analytics/summary` (views.AnalyticsSummary)."""

    window = serializers.CharField()
    stats = serializers.DictField(child=serializers.IntegerField(), help_text="Finished attempts per status.")


# -- operations --------------------------------------------------------------------------------


class ConfigProblemSerializer(serializers.Serializer):
    """One problem of a config that does not load (`gateway.config.errors.ConfigProblem`)."""

    file = serializers.CharField(allow_null=True)
    line = serializers.IntegerField(allow_null=True)
    key = serializers.CharField(allow_null=True)
    message = serializers.CharField()


class ReloadRefusedSerializer(serializers.Serializer):
    """`POST /system/reload`'s 409 (ops.SystemReload): the config on disk does not load."""

    error = serializers.CharField(help_text="Every problem in one line; the running configuration is kept.")
    problems = ConfigProblemSerializer(many=True)
