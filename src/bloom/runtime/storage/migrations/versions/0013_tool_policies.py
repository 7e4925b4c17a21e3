"""Tool policies: a project's default tool rules (`tool_policies`), set by admins and merged
into each of its tasks' `policy.tools` at create (docs/approvals.md).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "tool_policies",
        sa.Column("project", sa.Text(), nullable=False),
        sa.Column("allow", JSON, nullable=False),
        sa.Column("deny", JSON, nullable=False),
        sa.Column("ask", JSON, nullable=False),
        sa.Column("mode", sa.Text(), nullable=True),
        sa.Column("max_turns", sa.Integer(), nullable=True),
        sa.Column("allow_bypass", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_by", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("project", name="pk_tool_policies"),
    )


def downgrade() -> None:
    op.drop_table("tool_policies")
