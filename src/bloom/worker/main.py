"""`bloom worker run`'s process: the event loop, signals, and the exit status."""

import asyncio
import logging
import shutil
import signal

import structlog

from bloom.clients.membridge import MembridgeClient
from bloom.clients.runtime import RuntimeClient
from bloom.domain.clock import system_clock
from bloom.memory.settings import MemorySettings, load_memory_settings
from bloom.web.settings import SettingsError
from bloom.worker.agent import Worker
from bloom.worker.agents.process import death_signal_prefix, undumpable
from bloom.worker.process_control import reexec
from bloom.worker.settings import WorkerSettings

log = structlog.get_logger("bloom.worker")


def run_worker(settings: WorkerSettings) -> int:
    """Run until SIGTERM or SIGINT, then drain. Returns the exit status."""
    binary = shutil.which(settings.claude_bin)
    if binary is None:
        log.error(
            "claude_not_found",
            claude_bin=settings.claude_bin,
            hint="install the Claude CLI (npm i -g @anthropic-ai/claude-code) or set "
            "BLOOM_CLAUDE_BIN",
        )
        return 2
    settings = settings.model_copy(update={"claude_bin": binary})
    undumpable()  # the CLI, run as this same user, cannot read the keys in our environment
    death_signal_prefix()  # found once, before the loop runs
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request is noise here
    code, restart = asyncio.run(_serve(settings))
    if restart:
        log.info("worker_restarting")
        reexec()
    return code


def membridge_client(settings: WorkerSettings) -> MembridgeClient | None:
    """The client of the Membridge the worker announces itself to, when one is configured."""
    url = settings.membridge_url
    if not url:
        return None

    async def credentials() -> tuple[str, str]:
        return url, settings.membridge_key_value

    return MembridgeClient(credentials, system_clock, retries=0, timeout_sec=10.0)


def memory_settings(settings: WorkerSettings) -> MemorySettings | None:
    """This node's memory-sync settings (config.env and the environment), named as the worker
    is; None, said once, when they cannot be used."""
    try:
        memory = load_memory_settings()
    except SettingsError as exc:
        log.warning("memory_sync_unconfigured", error=str(exc))
        return None
    return memory.model_copy(update={"node_id": settings.name})


async def _serve(settings: WorkerSettings) -> tuple[int, bool]:
    """Run the worker; its exit status, and whether its agent asked it to start again."""
    async with RuntimeClient(settings.runtime_url, settings.api_key_value) as client:
        worker = Worker(settings, client, membridge_client(settings), memory_settings(settings))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stop)
        await worker.run()
    return (2 if worker.refused else 0), worker.restart
