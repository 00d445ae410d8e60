"""Every write transaction of the ledger, one SQLite writer at a time, waiting in the kernel rather
than in SQLite's busy handler. Four parts, each its own module:

- `transaction`: `writing()`, the only way the ledger's write methods open a transaction, on the
  process's one write connection (`write_connection`) lent to the thread's Django connection.
- `gate`: the lock writers queue on, a thread lock inside the process, then an exclusive `flock`
  on a file beside the database across the host's processes.
- `group_commit`: `shared()`, for processes with many writing threads (the API's workers): one
  writer thread commits every thread's writes of the moment together.
- `autocheckpoint`: which process's COMMITs checkpoint the WAL (a daemon announces it does).

Django's private transaction state is touched only through `ledger.django_internals`.
"""
