"""Runs SQLAlchemy Core statements on the raw async drivers: asyncpg and aiosqlite.

SQLAlchemy builds every statement and compiles it, once per dialect and set of parameter names,
into a `Plan`: the SQL text, the order of its positional parameters, the values bound inside the
statement, and how to turn driver rows into Python values. The drivers then run the plan. We do
not run statements through SQLAlchemy's async engine because, measured on this project's 2-core
machine, it costs 0.115 ms of CPU per statement and 0.4 ms per transaction, against 0.03 ms for
each on asyncpg directly: most of the lease engine's time (docs/decisions.md).

Compiling reads two private attributes of SQLAlchemy's `SQLCompiler`: `_bind_processors` (how
each bound value is converted for the driver) and `_result_columns` (the names and types of the
columns a statement returns). No public API gives either, and a minor release may change them,
so pyproject.toml pins SQLAlchemy below 2.1; check both before moving the pin.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import Executable, Table, bindparam, insert
from sqlalchemy.dialects.postgresql import asyncpg as postgresql_asyncpg
from sqlalchemy.dialects.sqlite import aiosqlite as sqlite_aiosqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import sqltypes
from sqlalchemy.sql.compiler import SQLCompiler

Row = Mapping[str, Any]
Appended = tuple[Table, dict[str, Any]]
_REQUIRED = object()
MAX_APPEND_SHAPES = 512
"""Combined inserts kept compiled (`Planner.appends`); others are built each time."""
MAX_COMBINED_ROWS = 1_000
MAX_COMBINED_ARGS = 30_000
"""The most rows, and arguments, one combined insert takes (asyncpg refuses more than 32,767
arguments, and compiling a statement of thousands of rows costs a second): more go in by
`executemany`, per table (a 1,000-task batch's audit entries and edges)."""


@dataclass(frozen=True, slots=True)
class Plan:
    """A compiled statement, ready for one driver."""

    statement: Executable
    sql: str
    names: tuple[str, ...]
    defaults: tuple[Any, ...]
    json_args: tuple[int, ...]
    columns: tuple[str, ...]
    json_columns: tuple[int, ...]
    bool_columns: tuple[int, ...]

    @property
    def returns_rows(self) -> bool:
        return bool(self.columns)

    def args(self, params: Mapping[str, Any]) -> list[Any]:
        """Positional arguments: the caller's values, else the statement's own."""
        values = [
            params.get(name, default)
            for name, default in zip(self.names, self.defaults, strict=True)
        ]
        if _REQUIRED in values:
            missing = sorted({n for n, v in zip(self.names, values, strict=True) if v is _REQUIRED})
            raise KeyError(f"statement parameters missing: {missing}")
        for index in self.json_args:  # the caller's JSON values; defaults are already encoded
            if values[index] is not None and self.names[index] in params:
                values[index] = orjson.dumps(values[index]).decode()
        return values

    def rows(self, records: Sequence[Sequence[Any]]) -> list[Row]:
        """Driver rows as mappings, decoding what the driver leaves encoded (SQLite)."""
        if not self.json_columns and not self.bool_columns:
            return [dict(zip(self.columns, record, strict=True)) for record in records]
        decoded: list[Row] = []
        for record in records:
            values = list(record)
            for index in self.json_columns:
                if isinstance(values[index], str | bytes):
                    values[index] = orjson.loads(values[index])
            for index in self.bool_columns:
                if values[index] is not None:
                    values[index] = bool(values[index])
            decoded.append(dict(zip(self.columns, values, strict=True)))
        return decoded


class Planner:
    """Compiles statements for one dialect, and remembers the result."""

    def __init__(self, kind: str):
        self.kind = kind
        self.dialect: Dialect = (
            postgresql_asyncpg.dialect()  # type: ignore[no-untyped-call]
            if kind == "postgresql"
            else sqlite_aiosqlite.dialect()
        )
        # asyncpg decodes JSON itself (see database.py); sqlite3 hands back text and integers
        self._decode_in_python = kind == "sqlite"
        self._plans: dict[tuple[int, frozenset[str]], Plan] = {}
        self._inserts: dict[str, Executable] = {}
        self._appends: dict[
            tuple[tuple[str, tuple[str, ...], int], ...], tuple[Plan, tuple[int, ...]]
        ] = {}

    def insert_of(self, table: Table) -> Executable:
        """`INSERT INTO table`, its columns those of the values it is run with."""
        statement = self._inserts.get(table.name)
        if statement is None:
            statement = self._inserts[table.name] = insert(table)
        return statement

    def appends(self, rows: list[Appended]) -> tuple[Plan, list[Any]]:
        """One statement inserting every row (PostgreSQL): a multi-row INSERT per table and
        set of columns, all but the last as data-modifying CTEs; compiled, with its arguments.
        Kept per shape (tables, columns, row counts) with the order its arguments go in."""
        groups: dict[tuple[str, tuple[str, ...]], list[dict[str, Any]]] = {}
        tables: dict[str, Table] = {}
        for table, values in rows:
            tables[table.name] = table
            groups.setdefault((table.name, tuple(values)), []).append(values)
        shape = tuple((name, keys, len(group)) for (name, keys), group in groups.items())
        flat = [value for group in groups.values() for row in group for value in row.values()]
        cached = self._appends.get(shape)
        if cached is None:
            cached = self._append_plan(shape, tables)
            if len(self._appends) < MAX_APPEND_SHAPES:
                self._appends[shape] = cached
        plan, order = cached
        return plan, [flat[index] for index in order]

    def _append_plan(
        self, shape: tuple[tuple[str, tuple[str, ...], int], ...], tables: Mapping[str, Table]
    ) -> tuple[Plan, tuple[int, ...]]:
        names = [
            f"a{g}_{i}_{key}"
            for g, (_, keys, count) in enumerate(shape)
            for i in range(count)
            for key in keys
        ]
        plan = self._compile(_combined_insert(shape, tables), frozenset(names))
        where = {name: index for index, name in enumerate(names)}
        return plan, tuple(where[name] for name in plan.names)

    def plan(self, statement: Executable, keys: frozenset[str]) -> Plan:
        cached = self._plans.get((id(statement), keys))
        if cached is not None and cached.statement is statement:
            return cached
        plan = self._compile(statement, keys)
        self._plans[(id(statement), keys)] = plan
        return plan

    def _compile(self, statement: Executable, keys: frozenset[str]) -> Plan:
        compiled = statement.compile(dialect=self.dialect, column_keys=sorted(keys))  # type: ignore[attr-defined]
        assert isinstance(compiled, SQLCompiler)
        if "POSTCOMPILE" in compiled.string:
            raise ValueError("expanding IN parameters are not supported; inline the values")
        names = tuple(compiled.positiontup or ())
        processors = compiled._bind_processors
        defaults: list[Any] = []
        json_args: list[int] = []
        for index, name in enumerate(names):
            bind = compiled.binds[name]
            if bind.required or bind.callable is not None:
                defaults.append(_REQUIRED)
            else:
                process = processors.get(name)
                defaults.append(process(bind.value) if callable(process) else bind.value)
            if self._decode_in_python and isinstance(bind.type, sqltypes.JSON):
                json_args.append(index)
        columns = tuple(entry.keyname for entry in compiled._result_columns)
        types = [entry.type for entry in compiled._result_columns]
        json_columns: tuple[int, ...] = ()
        bool_columns: tuple[int, ...] = ()
        if self._decode_in_python:
            json_columns = tuple(i for i, t in enumerate(types) if isinstance(t, sqltypes.JSON))
            bool_columns = tuple(i for i, t in enumerate(types) if isinstance(t, sqltypes.Boolean))
        return Plan(
            statement=statement,
            sql=compiled.string,
            names=names,
            defaults=tuple(defaults),
            json_args=tuple(json_args),
            columns=columns,
            json_columns=json_columns,
            bool_columns=bool_columns,
        )


def _combined_insert(
    shape: tuple[tuple[str, tuple[str, ...], int], ...], tables: Mapping[str, Table]
) -> Executable:
    inserts = [
        insert(tables[name]).values(
            [
                {key: bindparam(f"a{g}_{i}_{key}", type_=tables[name].c[key].type) for key in keys}
                for i in range(count)
            ]
        )
        for g, (name, keys, count) in enumerate(shape)
    ]
    *first, last = inserts
    return last.add_cte(*(each.cte(f"a{g}") for g, each in enumerate(first))) if first else last


def _combinable(rows: list[Appended]) -> bool:
    """Few enough rows (and values) for one combined insert."""
    return len(rows) <= MAX_COMBINED_ROWS and sum(map(len, (v for _, v in rows))) <= (
        MAX_COMBINED_ARGS
    )


class Connection:
    """One connection, as repositories use it: run a statement, get mappings back.

    Rows `append`ed wait, and go in before the next statement that names their table, or
    before the transaction commits (`flush`): on PostgreSQL all in one statement, a round trip
    where each row took one."""

    def __init__(self, conn: Any, planner: Planner):
        self.conn = conn
        self.planner = planner
        self.kind = planner.kind
        self._appended: list[Appended] = []
        self._appended_to: set[str] = set()

    @property
    def pending(self) -> bool:
        """Whether appended rows wait to be inserted."""
        return bool(self._appended)

    def append(self, table: Table, values: Mapping[str, Any]) -> None:
        """Insert a row, nothing read back, at the latest before the transaction commits."""
        self._appended.append((table, dict(values)))
        self._appended_to.add(table.name)

    async def flush(self) -> None:
        """Insert the rows appended so far."""
        rows = self._appended
        if not rows:
            return
        self._appended, self._appended_to = [], set()
        if self.kind == "postgresql" and _combinable(rows):
            await self._send(*self.planner.appends(rows))
            return
        # Many rows (a big batch's edges), or SQLite: table by table, each one's rows in order,
        # each run of alike rows one executemany (asyncpg pipelines it: one round trip)
        by_table: dict[str, list[Appended]] = {}
        for row in rows:
            by_table.setdefault(row[0].name, []).append(row)
        for same_table in by_table.values():
            table = same_table[0][0]
            start = 0
            while start < len(same_table):
                keys = same_table[start][1].keys()
                end = start + 1
                while end < len(same_table) and same_table[end][1].keys() == keys:
                    end += 1
                plan = self.planner.plan(self.planner.insert_of(table), frozenset(keys))
                args = [plan.args(values) for _, values in same_table[start:end]]
                await self.conn.executemany(plan.sql, args)
                start = end

    async def execute(
        self, statement: Executable, params: Mapping[str, Any] | None = None
    ) -> list[Row]:
        params = params or {}
        if self._appended:
            plan = self.planner.plan(statement, frozenset(params))
            if any(name in plan.sql for name in self._appended_to):
                await self.flush()
        return await self._run(statement, params)

    async def _run(self, statement: Executable, params: Mapping[str, Any]) -> list[Row]:
        plan = self.planner.plan(statement, frozenset(params))
        return await self._send(plan, plan.args(params))

    async def _send(self, plan: Plan, args: list[Any]) -> list[Row]:
        if self.kind == "postgresql":
            if plan.returns_rows:
                return await self.conn.fetch(plan.sql, *args)  # type: ignore[no-any-return]
            await self.conn.execute(plan.sql, *args)
            return []
        records = await self.conn.execute_fetchall(plan.sql, args)
        return plan.rows(records) if plan.returns_rows else []
