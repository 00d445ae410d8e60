from __future__ import annotations

from ledger.models.attempts import JobAttempt
from ledger.models.breakers import BreakerState, CircuitBreaker, CircuitBreakerTransition, Gate
from ledger.models.config_snapshots import ConfigSnapshot
from ledger.models.context import EventContext
from ledger.models.egress import EgressHost
from ledger.models.events import EventRecord
from ledger.models.facts import PluginFact, PluginState, StorageSequence
from ledger.models.jobs import (
    AttemptOutcome,
    EnqueueResult,
    InvalidJob,
    Job,
    JobLog,
    JobSpec,
    JobTransition,
    LostJob,
)
from ledger.models.relay_acceptances import RelayAcceptance
from ledger.models.schedules import ScheduleEntry, ScheduleStatus
from ledger.models.telemetry import JobStopwatch
from ledger.models.workers import PluginInstanceRecord, WorkerInstance

__all__ = [
    "AttemptOutcome",
    "BreakerState",
    "CircuitBreaker",
    "CircuitBreakerTransition",
    "ConfigSnapshot",
    "EgressHost",
    "EnqueueResult",
    "EventContext",
    "EventRecord",
    "Gate",
    "InvalidJob",
    "Job",
    "JobAttempt",
    "JobLog",
    "JobSpec",
    "JobStopwatch",
    "JobTransition",
    "LostJob",
    "PluginFact",
    "PluginInstanceRecord",
    "PluginState",
    "RelayAcceptance",
    "ScheduleEntry",
    "ScheduleStatus",
    "StorageSequence",
    "WorkerInstance",
]
