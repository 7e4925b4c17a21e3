"""Rows a write transaction appends (audit entries, results, artifacts, leases) go in with the
next statement that names their table, or before the commit; on PostgreSQL in one statement,
on SQLite (and for more rows than one statement takes) one executemany per table (both
databases)."""

from typing import Any

import pytest

from bloom.db.executor import MAX_COMBINED_ROWS
from bloom.domain.audit import AuditAction, task_audit
from bloom.runtime.container import Container
from bloom.runtime.storage.repositories import Repositories
from tests.support.clock import FakeClock


class Counting:
    """The driver connection, counting the statements sent through it."""

    def __init__(self, conn: Any):
        self.conn = conn
        self.sent: list[str] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.conn, name)
        if name not in ("execute", "fetch", "execute_fetchall", "executemany"):
            return method

        async def counted(sql: str, *args: Any) -> Any:
            self.sent.append(sql)
            return await method(sql, *args)

        return counted


def counting(tx: Repositories) -> Counting:
    driver = Counting(tx.audit.connection.conn)
    tx.audit.connection.conn = driver
    return driver


async def trail(container: Container, task_id: str, limit: int = 100) -> list[str]:
    async with container.db.read() as tx:
        return [entry.detail for entry in await tx.audit.find(limit=limit, task_id=task_id)]


async def test_appended_rows_are_in_by_the_commit(container: Container, clock: FakeClock):
    async with container.db.write() as tx:
        driver = counting(tx)
        for n in range(3):
            entry = task_audit(
                AuditAction.TASK_CREATED, "t1", now=clock.now, actor="a", detail=f"{n}"
            )
            await tx.audit.add(entry)
        assert driver.sent == []  # nothing sent yet
    assert sorted(await trail(container, "t1")) == ["0", "1", "2"]
    assert len(driver.sent) == 1


async def test_many_rows_go_in_by_executemany_in_order(container: Container, clock: FakeClock):
    """More rows than one combined insert takes (a 1,000-task batch's entries and edges):
    one executemany per table, each table's rows in the order appended."""
    count = MAX_COMBINED_ROWS + 5
    async with container.db.write() as tx:
        driver = counting(tx)
        for n in range(count):
            entry = task_audit(
                AuditAction.TASK_CREATED, "many", now=clock.now, actor="a", detail=f"{n}"
            )
            await tx.audit.add(entry)
    assert len(driver.sent) == 1
    details = await trail(container, "many", limit=2 * count)
    assert details == [str(n) for n in reversed(range(count))]  # newest first: as appended


async def test_a_statement_naming_the_table_sees_them(container: Container, clock: FakeClock):
    async with container.db.write() as tx:
        driver = counting(tx)
        entry = task_audit(AuditAction.TASK_CREATED, "t2", now=clock.now, actor="a", detail="x")
        await tx.audit.add(entry)
        await tx.workers.find()  # no audit table in it: the row still waits
        assert len(driver.sent) == 1
        assert [e.detail for e in await tx.audit.find(limit=10, task_id="t2")] == ["x"]
        assert driver.sent[1].startswith("INSERT INTO audit_logs")
        assert "FROM audit_logs" in driver.sent[2]


async def test_a_rolled_back_transaction_leaves_none(container: Container, clock: FakeClock):
    async def append_then_fail() -> None:
        async with container.db.write() as tx:
            entry = task_audit(AuditAction.TASK_CREATED, "t3", now=clock.now, actor="a", detail="x")
            await tx.audit.add(entry)
            raise RuntimeError("changed our mind")

    with pytest.raises(RuntimeError):
        await append_then_fail()
    assert await trail(container, "t3") == []
