"""Counted, not scanned: `task_counts` holds the tasks per status and the leases ever granted,
kept by triggers in the transaction of every change (filled here from the rows already stored);
and one agent's tasks are indexed newest first, as one worker's and one context's are.

PostgreSQL: the counts are spread over 32 slot rows, a transaction's changes all going to the
slot its id picks (`txid_current() % 32`), so concurrent transactions rarely meet on one row.
The triggers are deferred constraint triggers: they run at commit, so a slot row is locked only
while its transaction commits, and, that row being the last thing it locks, two transactions
never wait on each other through it (no deadlock). SQLite has one writer: slot 0, plain triggers.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bloom.runtime.storage.migrations.counting import (
    DEFERRED,
    PG_TRIGGERS,
    SLOTS,
    backfill,
    pg_function,
    sqlite_triggers,
)

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STATUSES = ("queued", "leased", "running", "completed", "failed", "dead", "cancelled")
# The SQL is made by `counting` from these constants only.
BACKFILL = backfill(STATUSES)


def upgrade() -> None:
    op.create_index("ix_llm_tasks_agent_created_at", "llm_tasks", ["agent_slug", "created_at"])
    op.create_table(
        "task_counts",
        sa.Column("slot", sa.Integer(), autoincrement=False, nullable=False),
        *(
            sa.Column(name, sa.BigInteger(), server_default="0", nullable=False)
            for name in (*STATUSES, "leases")
        ),
        sa.PrimaryKeyConstraint("slot", name="pk_task_counts"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE task_counts SET (fillfactor = 10)")
        # No change may fall between the backfill's count and the triggers: writers wait
        # (tasks before leases, the order the runtime's transactions take them in).
        op.execute("LOCK TABLE llm_tasks, leases IN SHARE ROW EXCLUSIVE MODE")
        op.execute(pg_function(STATUSES))
        for name, (event, table, condition) in PG_TRIGGERS.items():
            op.execute(
                f"CREATE CONSTRAINT TRIGGER {name} AFTER {event} ON {table} {DEFERRED} "
                f"{condition} EXECUTE FUNCTION task_counts_count()"
            )
        op.execute(BACKFILL)
        op.execute(f"INSERT INTO task_counts (slot) SELECT generate_series(1, {SLOTS - 1})")
        return
    for statement in sqlite_triggers(STATUSES).values():
        op.execute(statement)
    op.execute(BACKFILL)


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for name, (_, table, *_) in PG_TRIGGERS.items():
        op.execute(f"DROP TRIGGER {name} ON {table}" if postgres else f"DROP TRIGGER {name}")
    if postgres:
        op.execute("DROP FUNCTION task_counts_count()")
    op.drop_table("task_counts")
    op.drop_index("ix_llm_tasks_agent_created_at", table_name="llm_tasks")
