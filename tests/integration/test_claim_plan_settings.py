"""PostgreSQL only (the settings are its planner's): a claim's transaction plans without sorts
(the queue's index walked in order) and without JIT compilation, set by the claim's first
statement (the worker's check-in) and gone with the transaction. Without the second, a grant
in that transaction reading a fan-in of 500's answers (which must be sorted: a sort priced at
`disable_cost`) was compiled to machine code first: 160-220 ms (docs/benchmarks.md)."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from bloom.runtime.container import Container, build_container
from bloom.runtime.services.workers import Registration
from bloom.runtime.storage.repositories import Repositories
from tests.support.clock import FakeClock
from tests.support.databases import fresh_postgres_url, make_settings
from tests.support.postgres import PostgresCluster


@pytest.fixture
async def on_postgres(
    postgres: PostgresCluster, tmp_path: Path, clock: FakeClock
) -> AsyncIterator[Container]:
    built = build_container(make_settings(fresh_postgres_url(postgres), tmp_path), clock)
    yield built
    await built.db.dispose()


async def plan_settings(tx: Repositories) -> tuple[str, str]:
    settings = select(func.current_setting("enable_sort"), func.current_setting("jit"))
    [(sort, jit)] = await tx.audit.run(settings)
    return str(sort), str(jit)


@pytest.mark.parametrize("touch", [True, False])
async def test_a_claim_s_transaction_neither_sorts_nor_compiles(
    on_postgres: Container, clock: FakeClock, touch: bool
):
    await on_postgres.workers.register(Registration(name="w1"))
    async with on_postgres.db.write() as tx:
        assert await plan_settings(tx) == ("on", "on")  # the server's own
        assert await tx.workers.check_in("w1", clock.now, touch=touch) is not None
        assert await plan_settings(tx) == ("off", "off")
    async with on_postgres.db.write() as tx:
        assert await plan_settings(tx) == ("on", "on")
