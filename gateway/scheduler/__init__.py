"""The schedule calendar (spec 000 §4, "Scheduler" detailed reference, §5.8): when a `schedules:`
entry is next due, inside its constraints and local-time rules. Pure, with time passed in; the
daemon that fires the entries is gateway/daemon/scheduler.py."""
