"""Hand-written SQL for the queue's hot path, adapted through the models' own fields.

Why not the ORM here: building and compiling a query costs 0.2-0.5 ms of CPU under the GIL, and a
job takes about fifteen statements; the worker pool's throughput target (docs/performance.md)
needs the whole per-job ledger cost near 1 ms. Values still go through each field's
`get_db_prep_save` and come back through its converters, so SQLite and PostgreSQL see exactly
what the ORM would send. Status literals are inlined so SQLite can use the partial indexes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import Any

from django.db import connection, models


@cache
def _fields(model: type[models.Model]) -> dict[str, models.Field[Any, Any]]:
    return {str(f.column): f for f in model._meta.concrete_fields}


def _quote(name: str) -> str:
    return connection.ops.quote_name(name)


def prep(model: type[models.Model], column: str, value: Any) -> Any:
    return _fields(model)[column].get_db_prep_save(value, connection)


def insert(model: type[models.Model], values: Mapping[str, Any]) -> None:
    """INSERT one row; `values` must hold every NOT NULL column without a database default."""
    columns = list(values)
    sql = (
        f"INSERT INTO {_quote(model._meta.db_table)} ({', '.join(_quote(c) for c in columns)}) "
        f"VALUES ({', '.join(['%s'] * len(columns))})"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [prep(model, c, values[c]) for c in columns])


def update(model: type[models.Model], changes: Mapping[str, Any], where: Mapping[str, Any]) -> int:
    """UPDATE rows matching `where` and return the row count. `where` keys are columns (equality,
    None meaning IS NULL) or `column__lt`."""
    sets = ", ".join(f"{_quote(c)} = %s" for c in changes)
    params = [prep(model, c, v) for c, v in changes.items()]
    conditions = []
    for key, value in where.items():
        column, _, op = key.partition("__")
        if value is None:
            conditions.append(f"{_quote(column)} IS NULL")
            continue
        conditions.append(f"{_quote(column)} {'<' if op == 'lt' else '='} %s")
        params.append(prep(model, column, value))
    sql = f"UPDATE {_quote(model._meta.db_table)} SET {sets} WHERE {' AND '.join(conditions)}"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


def select_columns(model: type[models.Model]) -> str:
    return ", ".join(_quote(c) for c in _fields(model))


def from_row(model: type[models.Model], row: Sequence[Any]) -> Any:
    """A model instance from a row of `select_columns(model)`, through the fields' converters."""
    values = []
    for field, value in zip(_fields(model).values(), row, strict=True):
        expression = field.get_col(model._meta.db_table)
        for converter in (*connection.ops.get_db_converters(expression), *field.get_db_converters(connection)):
            value = converter(value, expression, connection)
        values.append(value)
    return model.from_db(connection.alias, [f.attname for f in _fields(model).values()], values)


def fetch_value(sql: str, params: Iterable[Any]) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(sql, list(params))
        row = cursor.fetchone()
    return row[0] if row else None
