"""The statements a test's own requests send to PostgreSQL, and the transactions they open: the
`sent` fixture (tests/integration/conftest.py)."""

import asyncio
from typing import Any

import pytest
from asyncpg.transaction import Transaction

from bloom.db import executor


class Sent:
    """The statements the executor sends, and the transactions asyncpg opens, for the test's
    own requests (the ASGI transport runs them in its task; the app's loops run in theirs)."""

    def __init__(self) -> None:
        self.statements: list[str] = []
        self.transactions = 0
        self.task: object = None

    def clear(self) -> None:
        self.statements.clear()
        self.transactions = 0
        self.task = asyncio.current_task()

    def ours(self) -> bool:
        return asyncio.current_task() is self.task


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Sent:
    seen = Sent()
    send, start = executor.Connection._send, Transaction.start

    async def counted_send(self: executor.Connection, plan: Any, args: list[Any]) -> Any:
        if seen.ours():
            seen.statements.append(plan.sql)
        return await send(self, plan, args)

    async def counted_start(self: Transaction) -> None:
        seen.transactions += seen.ours()
        await start(self)

    monkeypatch.setattr(executor.Connection, "_send", counted_send)
    monkeypatch.setattr(Transaction, "start", counted_start)
    return seen
