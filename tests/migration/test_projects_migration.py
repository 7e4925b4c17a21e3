"""Migration 0007 (managed projects) on a database with data: the two tables made, a project's
name and a node's row per project unique, existing rows untouched, and back down."""

from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.exc import IntegrityError

from bloom.runtime.storage.schema import SCHEMA
from tests.support.migrations import empty_database

PROJECT = (
    "INSERT INTO managed_projects (id, name, repo_url, canonical_id, created_at, updated_at) "
    "VALUES (:id, :name, 'https://git.example/x.git', 'c', 1, 1)"
)
NODE = "INSERT INTO project_node_status (id, project_id, node_id) VALUES (:id, 'p1', :node)"


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_migration_0007_makes_the_project_tables_and_goes_back_down(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = empty_database(kind, tmp_path, request)
    SCHEMA.upgrade(target, "0006")
    engine = create_engine(target.sync_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO runtime_settings (key, value) VALUES ('k', 'v')"))
        SCHEMA.upgrade(target, "0007")
        with engine.begin() as conn:
            conn.execute(text(PROJECT), {"id": "p1", "name": "demo"})
            conn.execute(text(NODE), {"id": "s1", "node": "n1"})
            row = conn.execute(text("SELECT clone_status FROM managed_projects")).one()
            assert row == ("pending",)
            status = conn.execute(text("SELECT clone_status FROM project_node_status")).one()
            assert status == ("pending",)
        for statement, values in [
            (PROJECT, {"id": "p2", "name": "demo"}),
            (NODE, {"id": "s2", "node": "n1"}),
        ]:
            with pytest.raises(IntegrityError), engine.begin() as conn:
                conn.execute(text(statement), values)
        command.downgrade(SCHEMA.alembic_config(target), "0006")
        with engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
            assert not tables & {"managed_projects", "project_node_status"}
            assert conn.execute(text("SELECT value FROM runtime_settings")).one() == ("v",)
        SCHEMA.upgrade(target)
        assert SCHEMA.current_revision(target) == SCHEMA.head_revision()
    finally:
        engine.dispose()
