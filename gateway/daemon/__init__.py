"""The long-running processes besides the worker daemon (gateway/execution/workers.py): the
scheduler, and `system start`'s supervisor of the API, workers, scheduler and housekeeping."""
