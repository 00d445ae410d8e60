"""The scheduler (spec 000 §4, "Scheduler" detailed reference, §5.8): `spec` types and validates the
`schedules:` entries at config load; `timing` computes due times, pure, with time passed in."""
