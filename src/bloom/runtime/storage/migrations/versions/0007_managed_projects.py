"""Managed projects (the reference's `managed_projects` and `project_node_status`): git
repositories cloned onto nodes by their agents; names unique, one status row per project and node.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "managed_projects",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("repo_url", sa.Text(), nullable=False),
        sa.Column("canonical_id", sa.Text(), nullable=False),
        sa.Column("target_path", sa.Text(), nullable=True),
        sa.Column("clone_status", sa.Text(), nullable=False, server_default="pending"),
        sa.Column("primary_node_id", sa.Text(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_managed_projects"),
    )
    op.create_index("ix_managed_projects_name", "managed_projects", ["name"], unique=True)
    op.create_table(
        "project_node_status",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("project_id", sa.String(), nullable=False),
        sa.Column("node_id", sa.Text(), nullable=False),
        sa.Column("clone_status", sa.Text(), nullable=False, server_default="pending"),
        sa.Column("last_sync_at", sa.BigInteger(), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("repo_path", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_project_node_status"),
    )
    op.create_index(
        "ix_project_node_status_project_node",
        "project_node_status",
        ["project_id", "node_id"],
        unique=True,
    )


def downgrade() -> None:
    op.drop_index("ix_project_node_status_project_node", table_name="project_node_status")
    op.drop_table("project_node_status")
    op.drop_index("ix_managed_projects_name", table_name="managed_projects")
    op.drop_table("managed_projects")
