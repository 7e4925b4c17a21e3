"""What the admin commands share (`bloom key`, `bloom user`, `bloom artifacts migrate`): they run
where the runtime's settings are (DATABASE_URL, or SQLite under BLOOM_DATA_DIR), on its database
directly, with no running server and no admin key, migrating the schema first if needed."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from bloom.cli.common import runtime_settings
from bloom.cli.output import fail
from bloom.domain.errors import ServiceError

if TYPE_CHECKING:  # the runtime's services are imported when a command runs on them
    from bloom.runtime.container import Container

T = TypeVar("T")


def on_runtime(action: "Callable[[Container], Awaitable[T]]") -> T:
    """`action` with the runtime's services, service refusals as one red line."""
    from bloom.runtime.container import build_container
    from bloom.runtime.storage.schema import SCHEMA

    settings, target = runtime_settings()
    if settings.migrate_on_start:
        SCHEMA.upgrade(target)

    async def go() -> T:
        container = build_container(settings.model_copy(update={"db_pool_size": 1}))
        try:
            return await action(container)
        finally:
            await container.close()

    try:
        return asyncio.run(go())
    except ServiceError as exc:
        fail(exc.message)
