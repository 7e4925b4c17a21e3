"""The five memory actions by name, each on a node made for it and closed after: what the CLI,
the worker's agent surface and automatic mode call."""

from enum import StrEnum
from pathlib import Path

from bloom.domain.clock import Clock, system_clock
from bloom.domain.memory import Report
from bloom.memory import inspect
from bloom.memory.node import MemoryNode
from bloom.memory.pull import pull
from bloom.memory.push import push
from bloom.memory.settings import MemorySettings
from bloom.objects.s3 import S3Bucket

CLAUDE_SETTINGS = Path("~/.claude/settings.json").expanduser()
"""Where Claude Code keeps its hooks (doctor checks them)."""


class Action(StrEnum):
    PUSH = "push"
    PULL = "pull"
    STATUS = "status"
    DOCTOR = "doctor"
    LEADERSHIP = "leadership"


async def perform(
    action: Action,
    settings: MemorySettings,
    *,
    bucket: S3Bucket | None = None,
    clock: Clock = system_clock,
) -> Report:
    """Run `action`; `SettingsError` when the settings lack what it needs."""
    node = MemoryNode(settings, bucket=bucket, clock=clock)
    try:
        match action:
            case Action.PUSH:
                return await push(node)
            case Action.PULL:
                return await pull(node)
            case Action.STATUS:
                return await inspect.status(node)
            case Action.DOCTOR:
                return await inspect.doctor(node, CLAUDE_SETTINGS)
            case Action.LEADERSHIP:
                return await inspect.leadership(node)
    finally:
        if bucket is None:
            await node.close()
