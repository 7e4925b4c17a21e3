"""What every repository shares: its connection, the dialect, and row-to-entity mapping."""

from dataclasses import fields
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Table, literal_column
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection

T = TypeVar("T")


class Repository:
    def __init__(self, conn: AsyncConnection, kind: str):
        self.conn = conn
        self.kind = kind

    @property
    def is_postgres(self) -> bool:
        return self.kind == "postgresql"

    def dialect_insert(self, table: Table) -> postgresql.Insert | sqlite.Insert:
        """An INSERT that supports ON CONFLICT, in this database's dialect."""
        return postgresql.insert(table) if self.is_postgres else sqlite.insert(table)


def entity_columns(table: Table, entity: type[Any]) -> list[Any]:
    """The table's columns that the entity dataclass has fields for, in field order."""
    return [table.c[f.name] for f in fields(entity)]


def to_entity(entity: type[T], row: Row[Any]) -> T:
    return entity(**row._mapping)


def is_state(column: Any, state: str) -> ColumnElement[bool]:
    """`column = 'state'` with the state inlined, so partial indexes on it are usable.

    A bound parameter would hide the value from the planner (and from SQLite's partial-index
    matching), and generic prepared plans would then ignore the partial index.
    """
    if not state.isidentifier():
        raise ValueError(f"not a state name: {state!r}")
    result: ColumnElement[bool] = column == literal_column(f"'{state}'")
    return result
