"""Who asked for a job: `job_queue.submitted_by`, as a closed set.

Behaviour keys on these values, never on free text: only scheduler-submitted attempts move circuit
breakers (spec 000 §5.8), only `system` runs `init` health, only `hook` roots signal hooks again.
A person acting in the audit console is recorded with their name after the submitter
(`admin:alice`); the name is for the audit trail and decides nothing.
"""

from __future__ import annotations

from enum import StrEnum


class Submitter(StrEnum):
    API = "api"
    WEBHOOK = "webhook"
    CLI = "cli"
    SCHEDULER = "scheduler"
    ROUTE = "route"  # a pipeline hop or a route's target: a child of another job
    HOOK = "hook"  # the root of a lifecycle hook pipeline (DSL reference §8)
    SYSTEM = "system"  # the gateway itself: a plugin's `init`, the pipelines its `scheduler.*` events start
    ADMIN = "admin"  # a person in the audit console
    RELAY = "relay"  # a peer gateway (remote event relay)
    MCP = "mcp"  # an agent over the Model Context Protocol (gateway/mcp/), with its token's name

    def by(self, actor: str | None) -> str:
        """The stored `submitted_by`: this submitter, and who acted for it when known."""
        return f"{self.value}:{actor}" if actor else self.value

    @classmethod
    def of(cls, submitted_by: str) -> Submitter | None:
        """The submitter of a stored `submitted_by`; None for text no producer writes (rows made
        by hand or by an older version)."""
        try:
            return cls(submitted_by.partition(":")[0])
        except ValueError:
            return None
