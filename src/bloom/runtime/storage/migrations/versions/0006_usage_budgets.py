"""What an attempt cost as typed columns of its result (cost, tokens, turns, duration, model),
copied from the metrics JSON the worker sent, so usage can be summed and grouped in SQL; what each
project spent per UTC day (`project_spend`, filled from those results); budgets per project.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BATCH = 1000
_COLUMNS = {
    "cost_usd": float,
    "input_tokens": int,
    "output_tokens": int,
    "tokens_used": int,
    "num_turns": int,
    "duration_ms": int,
    "model": str,
}
"""The new columns and the type each takes from the metrics (frozen here: a migration does not
follow later changes of the domain's `Usage`)."""


def upgrade() -> None:
    with op.batch_alter_table("llm_results") as batch:
        batch.add_column(sa.Column("cost_usd", sa.Float(), nullable=True))
        batch.add_column(sa.Column("input_tokens", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("output_tokens", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("tokens_used", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("num_turns", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("duration_ms", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("model", sa.Text(), nullable=True))
    _backfill()
    op.create_table(
        "project_spend",
        sa.Column("project", sa.Text(), nullable=False),
        sa.Column("day", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("project", "day", name="pk_project_spend"),
    )
    op.execute(
        "INSERT INTO project_spend (project, day, cost_usd) "
        "SELECT t.agent_slug, r.completed_at - r.completed_at % 86400000, SUM(r.cost_usd) "
        "FROM llm_results r JOIN llm_tasks t ON t.id = r.task_id "
        "WHERE r.cost_usd IS NOT NULL "
        "GROUP BY t.agent_slug, r.completed_at - r.completed_at % 86400000"
    )
    op.create_table(
        "budgets",
        sa.Column("project", sa.Text(), nullable=False),
        sa.Column("daily_usd", sa.Float(), nullable=True),
        sa.Column("monthly_usd", sa.Float(), nullable=True),
        sa.Column("held_until", sa.BigInteger(), nullable=True),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_by", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("project", name="pk_budgets"),
    )


def _backfill() -> None:
    """Existing results' usage from their metrics, in id order, a batch at a time."""
    results = sa.table(
        "llm_results",
        sa.column("id", sa.String()),
        sa.column("metrics", sa.JSON()),
        *(sa.column(name) for name in _COLUMNS),
    )
    connection = op.get_bind()
    after = ""
    while True:
        rows = connection.execute(
            sa.select(results.c.id, results.c.metrics)
            .where(results.c.id > after)
            .order_by(results.c.id)
            .limit(_BATCH)
        ).all()
        if not rows:
            return
        for row in rows:
            values = _usage(row.metrics)
            if values:
                connection.execute(sa.update(results).where(results.c.id == row.id).values(values))
        after = rows[-1].id


def _usage(metrics: object) -> dict[str, object]:
    """The metrics' values of the right type (a number for a count is never a bool or a float)."""
    if not isinstance(metrics, dict):
        return {}
    values: dict[str, object] = {}
    for name, kind in _COLUMNS.items():
        value = metrics.get(name)
        if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
            values[name] = float(value)
        elif kind is int and isinstance(value, int) and not isinstance(value, bool):
            values[name] = value
        elif kind is str and isinstance(value, str):
            values[name] = value[:128]
    return values


def downgrade() -> None:
    op.drop_table("budgets")
    op.drop_table("project_spend")
    with op.batch_alter_table("llm_results") as batch:
        for name in reversed(list(_COLUMNS)):
            batch.drop_column(name)
