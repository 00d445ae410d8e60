"""Every hand-written statement of the ledger, and the machinery that runs them adapted through
the models' own fields. Each statement has a test on both backends (tests/ledger/test_sql.py).

Why not the ORM here: building and compiling a query costs 0.2-0.5 ms of CPU under the GIL, and a
job takes about a dozen statements; the worker pool's throughput target (docs/performance.md)
needs the whole per-job ledger cost near 1 ms. Values still go through each field's adaptation
and come back through its converters, so SQLite and PostgreSQL see exactly what the ORM would
send. Statement text and per-field adapters are built once per model and backend.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache, lru_cache
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import signals
from django.db.models.base import ModelState

from ledger.django_internals import connection_set

Adapter = Callable[[Any], Any]


_thread = threading.local()


def current() -> BaseDatabaseWrapper:
    """This thread's connection. Django's look-up goes through asgiref's Local (~1 µs, and a job's
    statements made fifteen); it is kept per thread, for as long as Django keeps the same set of
    connections (a settings change in a test replaces the set)."""
    handler_set = connection_set()
    kept: tuple[object, BaseDatabaseWrapper] | None = getattr(_thread, "kept", None)
    if kept is not None and kept[0] is handler_set:
        return kept[1]
    conn = connections[DEFAULT_DB_ALIAS]
    _thread.kept = (handler_set, conn)
    return conn


def native(text: str, vendor: str) -> str:
    """`%s` placeholders in the backend's own style (sqlite3 wants `?`)."""
    return text.replace("%s", "?") if vendor == "sqlite" else text


def execute(text: str, params: Sequence[Any], conn: BaseDatabaseWrapper | None = None) -> Any:
    """Run a statement on the DB-API cursor of this thread's connection (`conn`, when the caller
    has already looked it up), inside whatever transaction Django has open on it. `text` must
    already be in the backend's placeholder style (`native`). Skips Django's cursor wrapper, which
    costs more than the statement, but not its error translation: a driver's exception surfaces as
    Django's (`django.db.OperationalError` and kin), and marks the connection so
    `close_old_connections` replaces a broken one."""
    conn = conn or current()
    if conn.connection is None:  # `ensure_connection` is a no-op on an open one, but not free
        conn.ensure_connection()
    with conn.wrap_database_errors:
        cursor = conn.connection.cursor()
        cursor.execute(text, params)
    return cursor


def execute_many(text: str, rows: Sequence[Sequence[Any]]) -> None:
    """`execute` for many parameter rows in one call: sqlite3 loops in C, psycopg pipelines the
    statements, so a batch costs about one round trip instead of one per row."""
    if not rows:
        return
    conn = current()
    conn.ensure_connection()
    with conn.wrap_database_errors:
        cursor = conn.connection.cursor()
        try:
            cursor.executemany(text, rows)
        finally:
            cursor.close()


@dataclass(frozen=True)
class _Plan:
    table: str
    columns: tuple[str, ...]
    quoted: Mapping[str, str]
    adapters: Mapping[str, Adapter]
    # Per column that has any: (its position in the row, its converters, its expression).
    converters: tuple[tuple[int, tuple[Callable[..., Any], ...], Any], ...]
    attnames: tuple[str, ...]


@cache
def _plan(model: type[models.Model], vendor: str) -> _Plan:
    conn = current()
    fields = list(model._meta.concrete_fields)
    adapters: dict[str, Adapter] = {}
    for field in fields:
        internal = field.get_internal_type()
        if internal in ("CharField", "TextField", "IntegerField", "BigIntegerField", "BigAutoField"):
            adapters[str(field.column)] = _identity
        elif internal == "DateTimeField":
            adapters[str(field.column)] = _datetime_adapter(conn)
        elif internal == "JSONField" and conn.vendor == "sqlite" and getattr(field, "encoder", None) is None:
            adapters[str(field.column)] = _sqlite_json
        else:
            adapters[str(field.column)] = _field_adapter(field)
    converters = []
    for position, field in enumerate(fields):
        expression = field.get_col(model._meta.db_table)
        django_chain = (*conn.ops.get_db_converters(expression), *field.get_db_converters(conn))
        chain = tuple(_converter(c, conn) for c in django_chain)
        if chain:
            converters.append((position, chain, expression))
    return _Plan(
        table=conn.ops.quote_name(model._meta.db_table),
        columns=tuple(str(f.column) for f in fields),
        quoted={str(f.column): conn.ops.quote_name(str(f.column)) for f in fields},
        adapters=adapters,
        converters=tuple(converters),
        attnames=tuple(f.attname for f in fields),
    )


def _converter(converter: Callable[..., Any], conn: BaseDatabaseWrapper) -> Callable[..., Any]:
    """The backend's conversion of a value read, as `_datetime_adapter` is of a value written: on
    a SQLite connection in UTC, a datetime column's text becomes the aware instant Django makes of
    it (`fromisoformat`, which its `parse_datetime` tries first, then UTC) without its settings
    and time-zone look-ups; anything else goes through Django's."""
    if conn.vendor != "sqlite" or conn.timezone is not UTC:
        return converter
    if getattr(converter, "__func__", None) is not getattr(type(conn.ops), "convert_datetimefield_value", None):
        return converter

    def convert(value: Any, expression: Any, connection: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, str):
            try:
                instant = datetime.fromisoformat(value)
            except ValueError:
                return converter(value, expression, connection)
            return instant if instant.tzinfo is not None else instant.replace(tzinfo=UTC)
        return converter(value, expression, connection)

    return convert


def _identity(value: Any) -> Any:
    return value


def _datetime_adapter(conn: BaseDatabaseWrapper) -> Adapter:
    """The backend's datetime adaptation. A job's statements bind about ten instants; on SQLite
    Django's adaptation of each is a settings look-up, two time-zone checks and a conversion
    (~3 µs). The instants the gateway makes are aware UTC (`timezone.now()`), and a SQLite
    connection in UTC stores them as their naive text, which is what Django's adaptation comes to
    for them; any other value goes through Django's. Elsewhere, the last few are remembered."""
    django_adapt = conn.ops.adapt_datetimefield_value
    if conn.vendor != "sqlite" or conn.timezone is not UTC:
        return lru_cache(maxsize=16)(django_adapt)

    def adapt(value: Any) -> Any:
        if isinstance(value, datetime) and value.tzinfo is UTC:
            return str(value.replace(tzinfo=None))
        return django_adapt(value)

    return adapt


def _sqlite_json(value: Any) -> Any:
    """What Django's JSONField (no encoder) sends SQLite: NULL for None, else the JSON text
    (`adapt_json_value`), without its four calls on the way, two JSON columns per job."""
    return None if value is None else json.dumps(value)


def _field_adapter(field: models.Field[Any, Any]) -> Adapter:
    def adapt(value: Any) -> Any:
        return field.get_db_prep_save(value, current())

    return adapt


def plan(model: type[models.Model]) -> _Plan:
    return _plan(model, current().vendor)


def prep(model: type[models.Model], column: str, value: Any) -> Any:
    return plan(model).adapters[column](value)


@cache
def _insert_sql(model: type[models.Model], vendor: str, columns: tuple[str, ...]) -> str:
    p = _plan(model, vendor)
    names = ", ".join(p.quoted[c] for c in columns)
    return native(f"INSERT INTO {p.table} ({names}) VALUES ({', '.join(['%s'] * len(columns))})", vendor)


def insert(model: type[models.Model], values: Mapping[str, Any]) -> None:
    """INSERT one row; `values` must hold every NOT NULL column without a database default."""
    conn = current()
    p = _plan(model, conn.vendor)
    columns = tuple(values)
    execute(_insert_sql(model, conn.vendor, columns), [p.adapters[c](values[c]) for c in columns], conn).close()


def insert_many(model: type[models.Model], rows: Sequence[Mapping[str, Any]]) -> None:
    """INSERT rows that all name the same columns, as `insert` does one."""
    if not rows:
        return
    vendor = current().vendor
    p = _plan(model, vendor)
    columns = tuple(rows[0])
    adapters = [p.adapters[c] for c in columns]
    params = [[adapt(row[c]) for adapt, c in zip(adapters, columns, strict=True)] for row in rows]
    execute_many(_insert_sql(model, vendor, columns), params)


@cache
def _update_sql(
    model: type[models.Model], vendor: str, sets: tuple[str, ...], where: tuple[tuple[str, str], ...]
) -> str:
    p = _plan(model, vendor)
    conditions = [
        f"{p.quoted[column]} IS NULL" if op == "null" else f"{p.quoted[column]} {'<' if op == 'lt' else '='} %s"
        for column, op in where
    ]
    assignments = ", ".join(f"{p.quoted[c]} = %s" for c in sets)
    return native(f"UPDATE {p.table} SET {assignments} WHERE {' AND '.join(conditions)}", vendor)


def update(model: type[models.Model], changes: Mapping[str, Any], where: Mapping[str, Any]) -> int:
    """UPDATE rows matching `where` and return the row count. `where` keys are columns (equality,
    None meaning IS NULL) or `column__lt`."""
    conn = current()
    p = _plan(model, conn.vendor)
    params = [p.adapters[c](v) for c, v in changes.items()]
    shape = []
    for key, value in where.items():
        column, _, op = key.partition("__")
        if value is None:
            shape.append((column, "null"))
        else:
            shape.append((column, op or "eq"))
            params.append(p.adapters[column](value))
    cursor = execute(_update_sql(model, conn.vendor, tuple(changes), tuple(shape)), params, conn)
    try:
        return int(cursor.rowcount)
    finally:
        cursor.close()


def select_columns(model: type[models.Model]) -> str:
    p = plan(model)
    return ", ".join(p.quoted[c] for c in p.columns)


def from_row(model: type[models.Model], row: Sequence[Any]) -> Any:
    """A model instance from a row of `select_columns(model)`, through the fields' converters.

    Built as `Model.from_db` builds it, without `Model.__init__`'s walk over the fields with its
    argument checks (~15 µs for a job's 21 columns, one claimed job per job run): the values go
    into the instance's `__dict__`, where `__init__` would set them one by one, the fields being
    plain attributes. Not for a model someone listens to `pre_init` or `post_init` for."""
    conn = current()
    p = _plan(model, conn.vendor)
    values = list(row)
    for position, converters, expression in p.converters:
        value = values[position]
        for converter in converters:
            value = converter(value, expression, conn)
        values[position] = value
    if signals.pre_init.has_listeners(model) or signals.post_init.has_listeners(model):
        return model.from_db(conn.alias, p.attnames, values)
    instance = model.__new__(model)
    state = ModelState()
    state.adding, state.db = False, conn.alias
    instance.__dict__.update(zip(p.attnames, values, strict=True), _state=state)
    return instance


def fetch_row(text: str, params: Iterable[Any]) -> tuple[Any, ...] | None:
    """The first row of a statement, or None; the cursor closed either way (an open statement
    would keep SQLite's read transaction, and with it the WAL, from moving on)."""
    conn = current()
    cursor = execute(native(text, conn.vendor), list(params), conn)
    try:
        row = cursor.fetchone()
    finally:
        cursor.close()
    return None if row is None else tuple(row)


def fetch_rows(text: str, params: Iterable[Any]) -> list[tuple[Any, ...]]:
    """Every row of a statement, the cursor closed either way (as `fetch_row`)."""
    conn = current()
    cursor = execute(native(text, conn.vendor), list(params), conn)
    try:
        return [tuple(row) for row in cursor.fetchall()]
    finally:
        cursor.close()


def fetch_value(text: str, params: Iterable[Any]) -> Any:
    row = fetch_row(text, params)
    return row[0] if row else None


def json_value(value: Any) -> Any:
    """A JSON column read by hand: SQLite (and psycopg for Django's JSONField) hand back its text."""
    return json.loads(value) if isinstance(value, str | bytes) else value


# -- the statements ------------------------------------------------------------------------------
# Statuses are literals, never parameters: SQLite uses a partial index only when the query's
# WHERE clause matches the index's own literally (a bound parameter never does).

# PostgreSQL only: the guards of a claim (JobQuerySet.claim_next). A claim decides from counts of
# running rows (the caps, the same-key rule), which SKIP LOCKED alone cannot protect across
# connections: two claimers each see the other's claim uncommitted. So a claim that could break a
# rule checks it again after its UPDATE, holding a transaction-scoped advisory lock on what it
# counts (a plugin's cap; a plugin, command and dedupe key), taken after the claimers before it
# committed: PostgreSQL makes a commit visible before it releases the transaction's locks, and
# each statement under READ COMMITTED reads what was committed when it began. Keys are hashed
# (hashtext): a collision only makes two claims wait for each other. A claim that breaks no rule
# (no cap that binds, no dedupe key) takes no lock at all. SQLite's write lock (BEGIN IMMEDIATE)
# already serialises claims, so it checks nothing twice.
CAP_LOCK = "SELECT pg_advisory_xact_lock(7242031, hashtext(%s))"
KEY_LOCK = "SELECT pg_advisory_xact_lock(7242032, hashtext(%s))"
# One plugin's running jobs across the ledger and those of one worker (parameters: the worker, the
# plugin); the caller's own claim counts, being its transaction's.
RUNNING_OF = (
    "SELECT COUNT(*), COALESCE(SUM(CASE WHEN claimed_by = %s THEN 1 ELSE 0 END), 0)"
    " FROM job_queue WHERE status = 'running' AND plugin = %s"
)
# Another running job of the same plugin, command and dedupe key (parameters: those, the job's id).
TWIN_RUNNING = (
    "SELECT 1 FROM job_queue WHERE status = 'running' AND plugin = %s AND command = %s AND dedupe_key = %s"
    " AND id <> %s LIMIT 1"
)
# A claim whose check failed, undone in its transaction: the row as it was (parameters: the
# columns the claim returned as `was_*`, then the job's id).
UNCLAIM = (
    "UPDATE job_queue SET status = 'queued', claimed_by = %s, lease_until = %s, started_at = %s,"
    " next_retry_at = %s WHERE id = %s AND status = 'running'"
)
# What a PostgreSQL claim returns after the caller's columns: what it overwrote, for UNCLAIM.
WAS = ("was_claimed_by", "was_lease_until", "was_started_at", "was_next_retry_at")


@cache
def look(plugin_count: int, vendor: str) -> str:
    """The read-only look an idle worker takes before it would take the write lock: whether a
    queued job of the `plugin_count` plugins is due, and whether any is queued at all (parameters:
    the plugins, now, the plugins again). Two probes of the queued-jobs partial index in one
    statement; the ORM's `.exists()` cost ten times its CPU, paid by every idle thread at every
    wake-up (docs/hot-path-profile-history.md, 1.2a)."""
    placeholders = ", ".join(["%s"] * plugin_count)
    queued = f"SELECT 1 FROM job_queue WHERE status = 'queued' AND plugin IN ({placeholders})"
    return native(
        f"SELECT ({queued} AND (next_retry_at IS NULL OR next_retry_at <= %s) LIMIT 1), ({queued} LIMIT 1)", vendor
    )


RUNNING_COUNTS = (
    "SELECT plugin, COUNT(*), SUM(CASE WHEN claimed_by = %s THEN 1 ELSE 0 END)"
    " FROM job_queue WHERE status = 'running' GROUP BY plugin"
)


@cache
def running_counts(vendor: str) -> str:
    """Each plugin's running jobs across the ledger, and those of one worker (parameter: its id):
    the caps across nodes and on the claiming node (ledger.caps.Cap), in one scan of the running
    rows."""
    return native(RUNNING_COUNTS, vendor)


# Read by JobQuerySet.recover_lost: one probe of (status, created_at)'s `running` range.
ANY_RUNNING = "SELECT 1 FROM job_queue WHERE status = 'running' LIMIT 1"


@cache
def claim(plugin_count: int, only: bool, vendor: str, returning: str) -> str:
    """Move the oldest runnable queued job of `plugin_count` open plugins to running, and return
    its row (`returning`: the columns; on PostgreSQL followed by the `WAS` columns). Parameters:
    worker id, lease_until, started_at, the plugins, now (for next_retry_at), then the job id when
    `only`. The pick and the compare-and-set are one UPDATE, so a job is never claimed twice."""
    placeholders = ", ".join(["%s"] * plugin_count)
    only_clause = "AND q.id = %s" if only else ""
    runnable = f"""
            WHERE q.status = 'queued' AND q.plugin IN ({placeholders})
              AND (q.next_retry_at IS NULL OR q.next_retry_at <= %s)
              AND (q.dedupe_key IS NULL OR NOT EXISTS (
                    SELECT 1 FROM job_queue r
                    WHERE r.status = 'running' AND r.dedupe_key = q.dedupe_key
                      AND r.plugin = q.plugin AND r.command = q.command))
              {only_clause}
            ORDER BY q.created_at, q.id LIMIT 1"""
    claimed = (
        "UPDATE job_queue SET status = 'running', claimed_by = %s, lease_until = %s, started_at = %s,"
        " next_retry_at = NULL"
    )
    if vendor == "postgresql":
        # Claimers skip each other's picks (SKIP LOCKED) rather than queue behind them; the
        # overwritten columns come back (`was`) in case the claim's check undoes it. Why the pick
        # is a scalar subquery inside `was`: that runs once (an InitPlan). The pick as `was`
        # itself was planned as a rescanned join, which moved every queued job to running.
        return native(
            f"""
        {claimed}
        FROM (
            SELECT w.id AS was_id, w.claimed_by AS was_claimed_by, w.lease_until AS was_lease_until,
                   w.started_at AS was_started_at, w.next_retry_at AS was_next_retry_at
            FROM job_queue w
            WHERE w.id = (SELECT q.id FROM job_queue q {runnable} FOR UPDATE SKIP LOCKED)
        ) was
        WHERE job_queue.id = was.was_id AND job_queue.status = 'queued'
        RETURNING {returning}, {", ".join(WAS)}
    """,
            vendor,
        )
    # Why name the index on SQLite: without statistics its planner takes (status, created_at) for
    # the equality on status and then sorts every queued job of the oldest created_at by id, and
    # the jobs of one batch (a scheduler tick, a bulk enqueue) share their created_at: 3,000 of
    # them made a claim's transaction ~580 µs instead of ~50 (docs/performance-history.md, item 43). The
    # partial index of queued jobs is already in (created_at, id) order. INDEXED BY also makes a
    # claim fail loudly, rather than slow down unseen, if that index is ever gone.
    return native(
        f"""
        {claimed}
        WHERE id = (SELECT q.id FROM job_queue q INDEXED BY job_queue_claim_idx {runnable}) AND status = 'queued'
        RETURNING {returning}
    """,
        vendor,
    )


@cache
def schedule_take(entry_count: int, vendor: str) -> str:
    """Move `entry_count` due schedule entries on, each only if it is still active and still due
    at the `next_run_at` it was read with; returns the ids won. Parameters: next_run_at (the
    following run), last_fired_at, status, updated_at, the ids, 'active', the due instant.
    Why the guard on next_run_at: two schedulers read the same due row; only the one whose UPDATE
    still finds the old value moves it on, so the run fires exactly once. RETURNING says which
    rows were won, which a shared row count could not."""
    return native(
        "UPDATE schedule_entries SET next_run_at = %s, last_fired_at = %s, status = %s, updated_at = %s"
        f" WHERE id IN ({', '.join(['%s'] * entry_count)}) AND status = %s AND next_run_at = %s RETURNING id",
        vendor,
    )


# Each fired entry's newest job. Parameters: job id, updated_at, entry id.
SCHEDULE_FIRED = "UPDATE schedule_entries SET last_job_id = %s, updated_at = %s WHERE id = %s"
# An entry's last run ended (ScheduleEntryQuerySet.settle): its id, the success (both NULL after
# a failure, which keeps the last success), the next run (NULL keeps it), updated_at, the entry,
# and the run again for the guard.
SCHEDULE_SETTLED = (
    "UPDATE schedule_entries SET settled_job_id = %s,"
    " last_success_job_id = COALESCE(%s, last_success_job_id),"
    " last_success_at = COALESCE(%s, last_success_at),"
    " next_run_at = COALESCE(%s, next_run_at), updated_at = %s"
    " WHERE id = %s AND last_job_id = %s"
)

# What the executor reads of other tables before a claimed job's spawn, returned by the claim's
# own RETURNING (`claim_next`): the plugin's `state` for the request, then the job's event_context
# row (its id, to tell a missing row from a row of NULLs; the pipeline, the step, the baggage).
# Two statements fewer per pipeline hop, one per plain job, read in the claim's snapshot.
CLAIM_READS = (
    "(SELECT state FROM plugin_state WHERE plugin_name = job_queue.plugin),"
    " (SELECT id FROM event_context WHERE id = job_queue.event_context_id),"
    " (SELECT pipeline_name FROM event_context WHERE id = job_queue.event_context_id),"
    " (SELECT step_id FROM event_context WHERE id = job_queue.event_context_id),"
    " (SELECT accumulated_json FROM event_context WHERE id = job_queue.event_context_id)"
)

# A job's pipeline step and baggage, read before each run of a pipeline hop (the ORM's
# `.filter().first()` cost ~200 µs of CPU per hop).
CONTEXT_HOP = "SELECT pipeline_name, step_id, accumulated_json FROM event_context WHERE id = %s"

# The compatibility view of a plugin's facts sent as a request's `state`, read once per job.
PLUGIN_STATE = "SELECT state FROM plugin_state WHERE plugin_name = %s"

# The live views' "did anything change?" (gateway/reports/live.py): one statement of index
# look-ups. The worker state is a literal, as the claim's statuses are.
CHANGE_MARKER = (
    "SELECT (SELECT MAX(id) FROM job_transitions), (SELECT MAX(id) FROM event_log),"
    " (SELECT MAX(updated_at) FROM circuit_breakers), (SELECT MAX(updated_at) FROM schedule_entries),"
    " (SELECT COUNT(*) FROM worker_instances WHERE state = 'running')"
)


@cache
def distinct_values(table: str, column: str) -> str:
    """The distinct non-null values of an indexed column, smallest first, at most the one
    parameter's number: a recursive query that jumps from one value to the next through the index
    (a "loose index scan"), so the cost is one seek per value however many rows share it. The
    ORM's DISTINCT reads every row. For the console's filters (gateway/console/filters.py)."""
    c, t = f'"{column}"', f'"{table}"'
    return (
        f"WITH RECURSIVE v(x, n) AS ("
        f" SELECT MIN({c}), 1 FROM {t}"
        f" UNION ALL SELECT (SELECT MIN({c}) FROM {t} WHERE {c} > v.x), n + 1"
        f" FROM v WHERE v.x IS NOT NULL AND n < %s"
        f") SELECT x FROM v WHERE x IS NOT NULL"
    )
