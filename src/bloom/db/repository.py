"""What every repository shares: its connection, the dialect, and row-to-entity mapping.

Statements are built once, at import, with named bind parameters, and executed with a dict of
values: building SQLAlchemy constructs per call costs more CPU than running them. For UPDATEs the
SET clause comes from the parameter names that match columns; WHERE parameters are prefixed `b_`
so they never collide with a column.
"""

from collections.abc import Mapping
from dataclasses import fields
from enum import Enum
from typing import Any, TypeVar, get_type_hints

from sqlalchemy import (
    ColumnElement,
    Executable,
    String,
    Table,
    and_,
    bindparam,
    func,
    literal_column,
    or_,
)
from sqlalchemy.dialects import postgresql

from bloom.db.executor import Connection, Row

T = TypeVar("T")


class Repository:
    def __init__(self, connection: Connection):
        self.connection = connection
        self.kind = connection.kind

    @property
    def is_postgres(self) -> bool:
        return self.kind == "postgresql"

    async def run(self, stmt: Executable, params: Mapping[str, Any] | None = None) -> list[Row]:
        return await self.connection.execute(stmt, params)

    def append_row(self, table: Table, values: Mapping[str, Any]) -> None:
        """Insert a row whose insert answers nothing, with the transaction's next statement
        that names its table, or before it commits (`Connection.append`)."""
        self.connection.append(table, values)

    async def rows(
        self, stmt: Executable, params: Mapping[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        """Plain tuples, for aggregates and pairs."""
        return [tuple(row.values()) for row in await self.run(stmt, params)]

    async def scalar(self, stmt: Executable, params: Mapping[str, Any] | None = None) -> Any:
        """The first column of the first row, or None when there is no row."""
        rows = await self.run(stmt, params)
        return next(iter(rows[0].values())) if rows else None

    async def one(self, entity: type[T], stmt: Executable, params: Mapping[str, Any]) -> T | None:
        """The first row of `stmt` as an `entity`, or None."""
        rows = await self.run(stmt, params)
        return to_entity(entity, rows[0]) if rows else None

    async def all(self, entity: type[T], stmt: Executable, params: Mapping[str, Any]) -> list[T]:
        return [to_entity(entity, row) for row in await self.run(stmt, params)]


def to_entity(entity: type[T], row: Mapping[str, Any]) -> T:
    """A row as an `entity` dataclass; its enum fields (the states) made from their stored text."""
    enums = _ENUM_FIELDS.get(entity)
    if enums is None:
        enums = _ENUM_FIELDS[entity] = _enum_fields(entity)
    if not enums:
        return entity(**row)
    values = dict(row)
    for name, enum in enums:
        values[name] = enum(values[name])
    return entity(**values)


_ENUM_FIELDS: dict[type[Any], tuple[tuple[str, type[Enum]], ...]] = {}


def _enum_fields(entity: type[Any]) -> tuple[tuple[str, type[Enum]], ...]:
    hints = get_type_hints(entity)
    return tuple(
        (f.name, hints[f.name])
        for f in fields(entity)
        if isinstance(hints[f.name], type) and issubclass(hints[f.name], Enum)
    )


def entity_columns(table: Table, entity: type[Any]) -> list[Any]:
    """The table's columns that the entity dataclass has fields for, in field order."""
    return [table.c[f.name] for f in fields(entity)]


def entity_values(entity: Any, columns: list[Any]) -> dict[str, Any]:
    return {column.name: getattr(entity, column.name) for column in columns}


def is_state(column: Any, state: str) -> ColumnElement[bool]:
    """`column = 'state'` with the state inlined, so partial indexes on it are usable.

    A bound parameter would hide the value from the planner (and from SQLite's partial-index
    matching), and generic prepared plans would then ignore the partial index.
    """
    if not state.isidentifier():
        raise ValueError(f"not a state name: {state!r}")
    result: ColumnElement[bool] = column == literal_column(f"'{state}'")
    return result


def text_rows(name: str, **columns: str) -> Any:
    """PostgreSQL: the text arrays bound as `columns` (column: parameter) read side by side, a
    row per index (`unnest`), as the derived table `name`: several keys in one statement."""
    arrays = (bindparam(param, type_=postgresql.ARRAY(String())) for param in columns.values())
    return func.unnest(*arrays).table_valued(*columns).render_derived(name, with_types=False)


LIKE_ESCAPE = "/"
"""The escape character of the LIKE patterns built here (not a backslash: PostgreSQL and SQLite
read backslashes in literals differently)."""


def like_literal(text: str) -> str:
    """`text` for a LIKE pattern, matching itself only: its %, _ and escape character escaped."""
    return (
        text.replace(LIKE_ESCAPE, LIKE_ESCAPE * 2)
        .replace("%", f"{LIKE_ESCAPE}%")
        .replace("_", f"{LIKE_ESCAPE}_")
    )


def older_than(at: Any, id_: Any) -> ColumnElement[bool]:
    """Keyset condition for a listing ordered newest first by (`at`, `id_`): the rows strictly
    older than the cursor in `b_at`, `b_after_id`. The lone `at <= b_at` is what an index on
    `at` (alone or after equality columns) can seek to; the OR settles ties by id."""
    cursor_at = bindparam("b_at", type_=at.type)
    return and_(
        at <= cursor_at,
        or_(at < cursor_at, id_ < bindparam("b_after_id", type_=id_.type)),
    )
