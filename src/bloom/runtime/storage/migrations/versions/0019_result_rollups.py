"""Rolled up, not scanned: `usage_days` holds the results summed per UTC day, project (the task's
agent_slug) and agent CLI (attempts, succeeded, failed, cost, tokens, turns, duration), and
`result_minutes` and `result_quarters` the results per minute and per quarter of an hour
(succeeded, failed), all kept by triggers on `llm_results` in the transaction that writes the
result (filled here from the rows already stored), so the overview's cost today and its
throughput read a few rows, however many results the day holds.

PostgreSQL: a transaction rolls into the slot it counts tasks into (`txid_current() % 32`), under
that slot's `task_counts` row lock, taken first; the insert trigger is a deferred constraint
trigger (it runs at commit), the update and delete ones run at once (`rolling.py`). SQLite has
one writer: slot 0, plain triggers.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bloom.runtime.storage.migrations.rolling import (
    PG_FUNCTION,
    SPANS,
    TRIGGERS,
    USAGE_COLUMNS,
    backfill,
    pg_function,
    pg_triggers,
    sqlite_triggers,
)

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FILLFACTOR = 50
"""Room on each page for the current day's, minute's and quarter's rows to be updated in place
(HOT)."""


def upgrade() -> None:
    op.create_table(
        "usage_days",
        sa.Column("day", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("project", sa.Text(), nullable=False),
        sa.Column("cli", sa.Text(), nullable=False),
        sa.Column("slot", sa.Integer(), autoincrement=False, nullable=False),
        *(
            sa.Column(name, sa.Float() if name == "cost_usd" else sa.BigInteger(), nullable=False)
            for name in USAGE_COLUMNS
        ),
        sa.PrimaryKeyConstraint("day", "project", "cli", "slot", name="pk_usage_days"),
    )
    for table in SPANS:
        op.create_table(
            table,
            sa.Column("start", sa.BigInteger(), autoincrement=False, nullable=False),
            sa.Column("slot", sa.Integer(), autoincrement=False, nullable=False),
            sa.Column("succeeded", sa.BigInteger(), nullable=False),
            sa.Column("failed", sa.BigInteger(), nullable=False),
            sa.PrimaryKeyConstraint("start", "slot", name=f"pk_{table}"),
        )
    if op.get_bind().dialect.name == "postgresql":
        for table in ("usage_days", *SPANS):
            op.execute(f"ALTER TABLE {table} SET (fillfactor = {FILLFACTOR})")
        # No result may be written between the backfill's sums and the triggers: writers wait.
        op.execute("LOCK TABLE llm_results IN SHARE ROW EXCLUSIVE MODE")
        op.execute(pg_function())
        for statement in pg_triggers().values():
            op.execute(statement)
    else:
        for statement in sqlite_triggers().values():
            op.execute(statement)
    for statement in backfill():
        op.execute(statement)


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for name in TRIGGERS:
        op.execute(f"DROP TRIGGER {name} ON llm_results" if postgres else f"DROP TRIGGER {name}")
    if postgres:
        op.execute(f"DROP FUNCTION {PG_FUNCTION}()")
    for table in SPANS:
        op.drop_table(table)
    op.drop_table("usage_days")
