"""The worker process: register, keep `max_concurrency` slots claiming and running tasks, stay
visible to the runtime (and Membridge), and drain cleanly when asked to stop.
"""

import asyncio
import contextlib
import os
import platform
import random
import time
from collections.abc import Mapping
from typing import Any

import structlog

from bloom import __version__
from bloom.clients.membridge import MembridgeClient, MembridgeUnavailable
from bloom.clients.runtime import RuntimeApiError, RuntimeClient, RuntimeUnreachable
from bloom.clients.wire import Grant, TaskInfo
from bloom.domain.clis import DEFAULT_CLI
from bloom.domain.ids import canonical_id
from bloom.memory.actions import Action
from bloom.memory.settings import MemorySettings
from bloom.worker import metrics, workspace_gc
from bloom.worker.agent_http import AgentSurface, Refusal, serving
from bloom.worker.agents import registry
from bloom.worker.conversations import ConversationBook
from bloom.worker.memory_auto import MemoryAutoSync
from bloom.worker.settings import WorkerSettings
from bloom.worker.task_run import Features, Pause, TaskRun

log = structlog.get_logger("bloom.worker")

PRESENCE_SEC = 15.0
WORKSPACE_GC_SEC = 3600.0
MAX_NOT_READY = 1000
"""The runtime keeps at most this much of why a worker is not ready."""
WAITING = "; this worker takes no task until they change (BLOOM_WORKER_ON_AUTH_FAILURE=wait)"
RETRY_MAX_SEC = 15.0


class Worker:
    def __init__(
        self,
        settings: WorkerSettings,
        client: RuntimeClient,
        membridge: MembridgeClient | None = None,
        memory: MemorySettings | None = None,
        environ: Mapping[str, str] = os.environ,
    ):
        self.settings = settings
        self.memory = memory
        """This node's memory-sync settings, when it syncs projects' memory."""
        self.memory_auto = (
            MemoryAutoSync(memory, settings.memory_projects)
            if memory is not None and settings.memory_projects
            else None
        )
        """Automatic mode: the projects this worker syncs by itself."""
        self.client = client
        self.membridge = membridge
        """Where the worker also announces itself (the seed's agent registry), if anywhere."""
        self.environ = environ
        self.agents = registry.adapters(settings)
        """The agent CLIs this worker runs, by name."""
        self.clis: dict[str, str] = {}
        """The CLIs this worker can run, with their versions (`detect_clis`)."""
        # the file keeps its first name, so an upgraded worker still resumes its conversations
        self.conversations = ConversationBook(settings.resolved_work_dir / "sessions.json")
        self.pause = Pause()
        self.features = Features()
        self.stopping = asyncio.Event()
        self.refused = False
        """The runtime refused this worker's key."""
        self.restart = False
        """Once stopped, start again (its agent's /restart or /self-update asked)."""
        self.running: set[str] = set()
        """Ids of the tasks running here (claimed or pushed)."""
        self.pushed: set[asyncio.Task[Grant | None]] = set()
        """Runs of tasks the runtime dispatched to this worker's agent surface."""
        self.pushed_leases: set[str] = set()
        """The leases of those runs."""
        self.fetching: set[str] = set()
        """Leases dispatched here whose task is being fetched from the runtime (slots taken)."""
        self.unready: dict[str, str] = {}
        """The CLIs this machine has that cannot run now, and why (no credentials and what to
        do, or refused ones waited on): left out of the `clis` it registers."""
        self.not_ready: str | None = None
        """Why this worker can run none of its CLIs now, if so (then it is not `ready`)."""
        self.refused_credentials: dict[str, str] = {}
        """By CLI, the fingerprint of the credentials it could not authenticate with, while the
        worker waits for them to change (BLOOM_WORKER_ON_AUTH_FAILURE=wait)."""

    def registration(self, status: str = "online", readiness: bool = True) -> dict[str, Any]:
        """The registration body; with `readiness` (the runtime's, not Membridge's), the CLIs
        the worker can run now (`clis`: those it has, less those without credentials), whether
        it can run any (`ready`) and, when not, why (`not_ready`), and whether it takes tasks
        with a workspace."""
        url = self.settings.advertised_agent_url
        ready: dict[str, Any] = {}
        if readiness:
            ready = {"ready": self.not_ready is None, "workspaces": self.settings.serves_workspaces}
            runnable = {name: v for name, v in self.clis.items() if name not in self.unready}
            ready |= {"clis": runnable} if runnable else {}
            ready |= {"not_ready": self.not_ready} if self.not_ready else {}
        return {
            "name": self.settings.name,
            **({"url": url} if url else {}),
            "status": status,
            "capabilities": {
                "claude_cli": True,
                "max_concurrency": self.settings.max_concurrency,
                "labels": self.settings.labels,
                **ready,
            },
            "agent_version": __version__,
            "os_info": f"{platform.node()} / {platform.system()} {platform.machine()}",
            "install_method": "bloom",
        }

    def stop(self) -> None:
        """Stop claiming; running tasks may finish within the drain time."""
        self.stopping.set()

    def stop_then(self, restart: bool) -> None:
        """Stop as `stop` does; with `restart`, the process then runs again (`restart`)."""
        self.restart = self.restart or restart
        self.stop()

    async def run(self) -> None:
        if self.settings.agent_port is None:
            await self._serve()
            return
        surface = AgentSurface(
            self.settings,
            self.start_pushed,
            lambda: sorted(self.running),
            self.memory,
            self.stop_then,
        )
        async with serving(surface):
            log.info("agent_listening", url=self.settings.advertised_agent_url)
            await self._serve()

    async def start_pushed(self, lease_id: str) -> Grant | Refusal:
        """Run a lease the runtime dispatched here, beside the claimed ones. The task comes from
        the runtime, fetched by the lease id with this worker's own key: a request can only
        point at a lease the runtime granted to this worker, never bring a prompt of its own.
        A refusal when every slot is busy (the runtime then gives the task back), when the lease
        already runs here, or when the runtime does not hold it active for this worker."""
        busy = len(self.running) + len(self.fetching)
        if self.stopping.is_set() or busy >= self.settings.max_concurrency:
            return Refusal(503, "No free slot")
        if lease_id in self.fetching or lease_id in self.pushed_leases:
            return Refusal(409, f"Lease {lease_id} is running here already")
        self.fetching.add(lease_id)
        try:
            grant = await self.client.granted(self.settings.name, lease_id)
        except RuntimeApiError as exc:
            status = exc.status if exc.status in (404, 409) else 502
            return Refusal(status, f"The runtime refused lease {lease_id}: {exc.message}")
        except RuntimeUnreachable as exc:
            return Refusal(502, f"The runtime could not be asked for lease {lease_id}: {exc}")
        finally:
            self.fetching.discard(lease_id)
        if grant.lease.id != lease_id or grant.lease.worker_id != self.settings.name:
            return Refusal(409, f"The runtime answered another lease than {lease_id}")
        if self.stopping.is_set() or grant.task.id in self.running:
            return Refusal(409, f"Task {grant.task.id} is running here already")
        self.running.add(grant.task.id)  # its slot is taken now, before the run starts
        self.pushed_leases.add(lease_id)
        run = asyncio.create_task(self._run(grant))
        self.pushed.add(run)
        run.add_done_callback(self.pushed.discard)
        run.add_done_callback(lambda _: self.pushed_leases.discard(lease_id))
        return grant

    def _has(self) -> list[str]:
        """The CLIs this machine has (`detect_clis`; Claude always), in the adapters' order."""
        return [name for name in self.agents if name in self.clis or name == DEFAULT_CLI]

    async def check_credentials(self) -> None:
        """Look for each CLI's credentials (without calling a model), as the CLI will be run
        (its adapter's `credentials_problem`); say so when they go missing, and when they come
        back."""
        unready = {}
        for name in self._has():
            agent = self.agents[name]
            env = agent.environment(self.environ, "default")
            reason = await asyncio.to_thread(agent.credentials_problem, env)
            refused = self.refused_credentials.get(name)
            if refused is not None:
                if reason is None and agent.credentials_fingerprint(env) == refused:
                    reason = self.unready.get(name)  # the same credentials the CLI could not use
                else:  # gone, or changed: found again, they are back
                    del self.refused_credentials[name]
            if reason:
                unready[name] = reason
        self._unready(unready)

    def _unready(self, unready: dict[str, str]) -> None:
        """The CLIs that cannot run now are `unready` (by name, why): each change logged
        (`<cli>_not_ready`, `<cli>_ready`); with none left to run, the worker is not ready."""
        for name in self._has():
            reason, was = unready.get(name), self.unready.get(name)
            if reason and reason != was:
                log.warning(f"{name}_not_ready", reason=reason)
            elif reason is None and was:
                log.info(f"{name}_ready", worker=self.settings.name)
        self.unready = unready
        has = self._has()
        if any(name not in unready for name in has):
            self.not_ready = None
        elif len(has) == 1:
            self.not_ready = unready[has[0]]
        else:
            said = "; ".join(self._named(name, unready[name]) for name in has)
            self.not_ready = said[:MAX_NOT_READY]

    def _named(self, cli: str, reason: str) -> str:
        """`reason` saying which CLI it is about (as it does already when it names it)."""
        return reason if f"{self.agents[cli].title} CLI" in reason else f"{cli}: {reason}"

    async def credentials_refused(self, cli: str, message: str) -> None:
        """A run of the CLI `cli` could not authenticate and the worker waits for its
        credentials (instead of failing the task): it registers without that CLI (not ready
        when it has no other), taking none of its tasks until `check_credentials` finds its
        credentials changed, or gone and then back."""
        agent = self.agents[cli]
        env = agent.environment(self.environ, "default")
        self.refused_credentials[cli] = agent.credentials_fingerprint(env)
        reason = message[: MAX_NOT_READY - len(WAITING)].rstrip(" .") + WAITING
        self._unready(self.unready | {cli: reason})
        try:
            await self.client.register_worker(self.registration())
        except (RuntimeUnreachable, RuntimeApiError) as exc:
            log.warning("presence_failed", error=str(exc))

    async def detect_clis(self) -> None:
        """Which agent CLIs this machine has (each adapter finds its own), for registration."""
        found = {}
        for name, agent in self.agents.items():
            version = await asyncio.to_thread(agent.detect)
            if version is not None:
                found[name] = version
        self.clis = found
        log.info("agent_clis", clis=found)

    async def _serve(self) -> None:
        await self.detect_clis()
        await self.check_credentials()
        await self._register()
        if self.stopping.is_set():
            return
        if self.memory_auto is not None:
            await self.memory_auto.start()
        log.info("worker_ready", worker=self.settings.name, slots=self.settings.max_concurrency)
        helpers = [asyncio.create_task(self._presence())]
        if self.memory_auto is not None:
            helpers.append(asyncio.create_task(self.memory_auto.keep_leases()))
        if self.membridge:
            helpers.append(asyncio.create_task(self._membridge_presence()))
        if self.settings.serves_workspaces:
            helpers.append(asyncio.create_task(self._collect_workspaces()))
        claiming = self.settings.max_concurrency if self.settings.claim else 0
        slots = [asyncio.create_task(self._slot()) for _ in range(claiming)]
        await self.stopping.wait()
        log.info("worker_draining", drain_timeout_sec=self.settings.drain_timeout_sec)
        running = [*slots, *self.pushed]
        if running:  # none with --no-claim and nothing dispatched (asyncio.wait refuses none)
            _, late = await asyncio.wait(running, timeout=self.settings.drain_timeout_sec)
            for slot in late:  # tasks still running after the drain time: stop them
                slot.cancel()
            await asyncio.gather(*running, return_exceptions=True)
        for helper in helpers:
            helper.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
        await self._say_goodbye()
        log.info("worker_stopped")

    async def _collect_workspaces(self) -> None:
        """Unused worktrees removed at start and every hour (`workspace_gc`)."""
        settings = self.settings
        while True:
            try:
                removed = await workspace_gc.collect(
                    settings.workspaces_dir,
                    time.time(),
                    settings.workspace_retention_hours * 3600,
                    settings.workspace_min_free_mb * 1024 * 1024,
                )
            except OSError as exc:
                log.warning("workspace_gc_failed", error=str(exc))
            else:
                if removed:
                    log.info("workspaces_removed", paths=[str(path) for path in removed])
            await asyncio.sleep(WORKSPACE_GC_SEC)

    async def _register(self) -> None:
        """Register with the runtime, retrying until it answers (or the worker is stopped). A
        refused key stops the worker: retrying cannot help."""
        attempt = 0
        while not self.stopping.is_set():
            try:
                await self.client.register_worker(self.registration())
                return
            except RuntimeApiError as exc:
                if exc.status in (401, 403):
                    log.error("register_refused", error=exc.message, worker=self.settings.name)
                    self.refused = True
                    self.stop()
                    return
                error = exc.message
            except RuntimeUnreachable as exc:
                error = str(exc)
            attempt += 1
            log.warning("register_failed", error=error, attempt=attempt)
            await self._sleep(min(0.5 * 2**attempt, RETRY_MAX_SEC))

    async def _presence(self) -> None:
        """Register again now and then: keeps the worker online while every slot is busy, and
        brings it back if an operator deleted it."""
        while True:
            await asyncio.sleep(PRESENCE_SEC)
            await self.check_credentials()
            try:
                await self.client.register_worker(self.registration())
            except (RuntimeUnreachable, RuntimeApiError) as exc:
                log.warning("presence_failed", error=str(exc))

    async def _membridge_presence(self) -> None:
        assert self.membridge is not None
        project = self.settings.project_dir.resolve().name if self.settings.project_dir else None
        while True:
            beats = (
                self.memory_auto.beats(self.settings.name, __version__) if self.memory_auto else []
            )
            if project and not any(beat["project_id"] == project for beat in beats):
                beats.append({
                    "node_id": self.settings.name,
                    "canonical_id": canonical_id(project),
                    "project_id": project,
                    "agent_version": __version__,
                })  # fmt: skip
            try:
                await self.membridge.register_agent(self.registration(readiness=False))
                for beat in beats:
                    await self.membridge.node_heartbeat(beat)
            except MembridgeUnavailable as exc:
                log.warning("membridge_unreachable", error=str(exc))
            await asyncio.sleep(self.settings.membridge_heartbeat_sec)

    async def _say_goodbye(self) -> None:
        """Tell the runtime and Membridge this worker is offline, so that its contexts move to
        other workers at once (best effort: without it they notice within a minute)."""
        with contextlib.suppress(RuntimeUnreachable, RuntimeApiError):
            await self.client.register_worker(self.registration("offline"))
        if self.membridge is None:
            return
        with contextlib.suppress(MembridgeUnavailable):
            await self.membridge.register_agent(
                self.registration("offline", readiness=False), timeout_sec=3
            )
        await self.membridge.close()

    async def _slot(self) -> None:
        """Claim and run tasks, one at a time, until the worker stops."""
        failures = 0
        while not self.stopping.is_set():
            if self.pause.remaining_sec() > 0:
                log.info("worker_paused", seconds=round(self.pause.remaining_sec()))
                await self._sleep(self.pause.remaining_sec())
                continue
            if self._waiting():  # not ready: the runtime grants nothing
                await self._sleep(PRESENCE_SEC)
                continue
            claim = asyncio.create_task(
                self.client.claim(
                    self.settings.name,
                    wait_sec=self.settings.claim_wait_sec,
                    ttl_sec=self.settings.lease_ttl_sec,
                )
            )
            stop = asyncio.create_task(self.stopping.wait())
            await asyncio.wait({claim, stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if not claim.done():
                claim.cancel()  # the runtime sees the hang-up and grants nothing
                await asyncio.gather(claim, return_exceptions=True)
                return
            try:
                grant = claim.result()
            except (RuntimeUnreachable, RuntimeApiError) as exc:
                failures += 1
                metrics.claim_answered("failed")
                log.warning("claim_failed", error=str(exc), attempt=failures)
                if isinstance(exc, RuntimeApiError) and exc.status == 404:
                    await self._register()  # the runtime forgot us: introduce ourselves again
                await self._sleep(min(0.5 * 2**failures, RETRY_MAX_SEC))
                continue
            failures = 0
            metrics.claim_answered("empty" if grant is None else "granted")
            while grant is not None:  # the complete of each may have claimed the next
                grant = await self._run(grant, follow=True)

    def _waiting(self) -> bool:
        """Waiting for refused credentials with no CLI left to run (not ready)."""
        return bool(self.refused_credentials) and self.not_ready is not None

    def _takes_next(self, task: TaskInfo) -> bool:
        """Whether a slot ending `task` has room for its next one at once (the complete claims
        it): not when stopping, paused, waiting for credentials, or about to push the task's
        memory (the next lease would wait unconfirmed meanwhile)."""
        return not (
            self.stopping.is_set()
            or self.pause.remaining_sec() > 0
            or self._waiting()
            or (self.memory_auto is not None and self.memory_auto.covers(task.agent_slug))
        )

    async def _run(self, grant: Grant, *, follow: bool = False) -> Grant | None:
        """Run one task; a drain that runs out of time cancels it and waits for its cleanup.
        With `follow` (a claiming slot's), its complete may claim the slot's next task, which is
        returned."""
        run = TaskRun(
            self.settings,
            self.client,
            self.conversations,
            self.pause,
            grant,
            self.environ,
            self.credentials_refused,
            claim_next=self._takes_next if follow else None,
            features=self.features,
            agent=self.agents.get(grant.task.cli),
        )
        task = asyncio.create_task(run.run())
        self.running.add(grant.task.id)
        try:
            following = await asyncio.shield(task)
        except asyncio.CancelledError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise
        finally:
            self.running.discard(grant.task.id)
        if self.memory_auto is not None:  # the task's Claude session may have added memories
            await self.memory_auto.sync(Action.PUSH, grant.task.agent_slug)
        return following

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake at once when the worker is stopped."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds * random.uniform(0.9, 1.1))
