"""The node-agent HTTP surface a worker serves with `--agent-port`, so the runtime can push a
task to it (dispatch) as it does to the reference's agent (REFERENCE_BEHAVIOUR.md §4):

- `GET /health` (public): version, host, OS, capabilities, whether the Claude CLI was found.
- `POST /execute-task`: the runtime's dispatch. The body names the lease it granted
  (`lease_id`); the worker fetches that lease and its task from the runtime with its own key and
  runs it exactly as a claimed one (heartbeats, live output, one fenced complete); the answer
  comes at once (`{ok: true, accepted: true}`), the run goes on in the background.
- `GET /status`: the tasks running here; with `?project=`, that project's memory too.
- `GET /metrics`: Prometheus' text format (`worker/metrics.py`).
- `POST /sync/pull`, `POST /sync/push` (`{project}`; also `/pull`, `/push`), `GET|POST /doctor`:
  memory sync on this node (docs/memory-sync.md), answered as the reference agent answers:
  `ok` (exit code 0), `returncode` (1 error, 2 primary refused pull, 3 secondary blocked push),
  `detail`, and the report's facts.
- `POST /clone` `{repo_url, project_name, target_path?, branch?}`: a managed project cloned (or
  pulled) under the repositories' base (`clone.py`), only with `--allow-clone` and an agent key;
  403 otherwise.
- `POST /restart`, `POST /self-update` `{branch?}`, `POST /uninstall`: process control
  (`process_control.py`: drain then exec; pull and sync then restart; drain and exit 0), only
  with `--allow-process-control` and an agent key; 403 otherwise, as the reference agent
  answers while process control is not enabled.

With an agent key configured every call but health needs it in `X-MEMBRIDGE-AGENT` (401); the
worker refuses to serve beyond loopback without one (`WorkerSettings.check_exposure`). A body
over `BLOOM_MAX_BODY_BYTES` is refused (413) as the servers refuse it (`web/guards.py`).
"""

import asyncio
import contextlib
import hmac
import json
import os
import platform
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bloom import __version__
from bloom.clients.wire import Grant
from bloom.domain.fleet import AGENT_KEY_HEADER, node_agent_key
from bloom.domain.ids import canonical_id
from bloom.domain.memory import ExitCode, Report
from bloom.memory.actions import Action, perform
from bloom.memory.settings import MemorySettings
from bloom.web.guards import TOO_LARGE, BodyLimitMiddleware, BodyTooLarge, OriginGuardMiddleware
from bloom.web.origins import OriginPolicy
from bloom.web.settings import SettingsError
from bloom.worker import metrics, process_control
from bloom.worker.clone import Checkout, GitRefused, check_out
from bloom.worker.settings import WorkerSettings

KEY_HEADER = AGENT_KEY_HEADER.lower()


def _error_body(detail: str) -> bytes:
    """The agent's refusals: the reference agent's shape, `{ok: false, detail}`."""
    return json.dumps({"ok": False, "detail": detail}).encode()


TOO_LARGE_BODY = _error_body(TOO_LARGE)
LEASE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
CLONE_DISABLED = (
    "Clone is disabled: start the worker with --allow-clone (BLOOM_WORKER_ALLOW_CLONE)."
)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a dispatched lease does not run here: the status and detail the surface answers."""

    status: int
    detail: str


class AgentSurface:
    """What the HTTP surface asks of the worker: start a granted task, and what runs."""

    def __init__(
        self,
        settings: WorkerSettings,
        start: Callable[[str], Awaitable[Grant | Refusal]],
        running: Callable[[], list[str]],
        memory: MemorySettings | None = None,
        stop: Callable[[bool], None] = lambda restart: None,
    ):
        self.settings = settings
        self.start = start
        """Runs a lease of this worker's, fetched by its id from the runtime, in the background."""
        self.running = running
        self.stop = stop
        """Drains the worker; with True it then starts again (exec)."""
        self.started_at = int(time.time() * 1000)
        self.memory = memory
        """This node's memory-sync settings (the project comes with each request)."""
        self.checkouts: set[Path] = set()
        """The paths a clone or pull is running in."""

    def app(self) -> Starlette:
        routes = [
            Route("/health", self.health, methods=["GET"]),
            Route("/status", self.status, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/execute-task", self.execute, methods=["POST"]),
            *(
                Route(path, self._memory_route(action), methods=["POST"])
                for action in (Action.PULL, Action.PUSH)
                for path in (f"/sync/{action}", f"/{action}")
            ),
            Route("/doctor", self._memory_route(Action.DOCTOR), methods=["GET", "POST"]),
            Route("/clone", self.clone, methods=["POST"]),
            Route("/restart", self.restart, methods=["POST"]),
            Route("/self-update", self.self_update, methods=["POST"]),
            Route("/uninstall", self.uninstall, methods=["POST"]),
        ]
        limit = self.settings.max_body_bytes
        keyless = not self.settings.agent_key.get_secret_value()
        origins = OriginPolicy(
            open_mode="without an agent key (BLOOM_AGENT_KEY)" if keyless else None,
            allowed_hosts=self.settings.allowed_hosts,
            own_headers=(KEY_HEADER.encode(),),
        )
        return Starlette(
            routes=routes,
            middleware=[
                Middleware(OriginGuardMiddleware, policy=origins, error_body=_error_body),
                Middleware(BodyLimitMiddleware, max_bytes=limit, answer=TOO_LARGE_BODY),
            ],
            exception_handlers={BodyTooLarge: _too_large},
        )

    def _refused(self, request: Request) -> JSONResponse | None:
        """401 unless the caller sent this node's agent key. A node still configured with the
        fleet's key (as before keys were per node) takes its own key derived from it too."""
        key = self.settings.agent_key.get_secret_value()
        if not key:
            return None
        given = request.headers.get(KEY_HEADER, "").encode()
        own = node_agent_key(key, self.settings.name)
        if not any(hmac.compare_digest(given, known.encode()) for known in (key, own)):
            return JSONResponse({"ok": False, "detail": "Unauthorized"}, status_code=401)
        return None

    async def health(self, _: Request) -> JSONResponse:
        return JSONResponse(
            {
                "status": "ok",
                "service": "bloom-worker",
                "version": __version__,
                "node_id": self.settings.name,
                "pid": os.getpid(),
                "started_at": self.started_at,
                "hostname": platform.node(),
                "os_info": f"{platform.system()} {platform.release()} {platform.machine()}",
                "claude_cli": self.settings.claude_bin,
                "capabilities": {
                    "execute_task": True,
                    "process_control": self.settings.process_control_refused is None,
                    "clone": self.settings.clone_refused is None,
                    "max_concurrency": self.settings.max_concurrency,
                },
            }
        )

    async def metrics(self, request: Request) -> Response:
        """Prometheus' text format; the agent key, when set, unless BLOOM_METRICS_PUBLIC."""
        if not self.settings.metrics_public:
            refused = self._refused(request)
            if refused is not None:
                return refused
        text = metrics.scrape(len(self.running()), self.settings.max_concurrency)
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    async def status(self, request: Request) -> JSONResponse:
        refused = self._refused(request)
        if refused is not None:
            return refused
        running = self.running()
        slots = self.settings.max_concurrency
        answer: dict[str, Any] = {"ok": True, "worker": self.settings.name, "running": running,
                                  "free_slots": max(0, slots - len(running))}  # fmt: skip
        project = request.query_params.get("project")
        if project:
            answer["memory"] = await self.sync(Action.STATUS, project)
        return JSONResponse(answer)

    def _memory_route(self, action: Action) -> Callable[[Request], Awaitable[JSONResponse]]:
        async def route(request: Request) -> JSONResponse:
            refused = self._refused(request)
            if refused is not None:
                return refused
            project: object = request.query_params.get("project", "")
            if request.method == "POST":
                try:
                    project = (await request.json())["project"]
                except (ValueError, KeyError, TypeError):
                    project = None
            if not isinstance(project, str) or not project:
                detail = "Name the project: a JSON body {project} (or ?project= on GET)"
                return JSONResponse({"ok": False, "detail": detail}, status_code=422)
            return JSONResponse(await self.sync(action, project))

        return route

    async def sync(self, action: Action, project: str) -> dict[str, Any]:
        """One memory action on this node, answered as the reference agent answers a sync."""
        if self.memory is None:
            report = Report(ExitCode.ERROR, "memory sync is not configured on this node")
        else:
            settings = self.memory.model_copy(update={"project": project})
            try:
                report = await perform(action, settings)
            except SettingsError as exc:
                report = Report(ExitCode.ERROR, f"memory sync is not configured: {exc}")
        return {
            **report.facts,
            "ok": report.ok,
            "action": action.value,
            "project": project,
            "canonical_id": canonical_id(project),
            "node_id": self.settings.name,
            "hostname": platform.node(),
            "returncode": int(report.code),
            "detail": report.detail,
        }

    async def execute(self, request: Request) -> JSONResponse:
        """The runtime's dispatch names a lease (`lease_id`); the task is fetched from the
        runtime by it. The prompt, context and policy the body carries (for the reference's
        agent) are never read: a forged body runs nothing."""
        refused = self._refused(request)
        if refused is not None:
            return refused
        try:
            body: Any = await request.json()
        except ValueError:
            body = None
        lease_id = body.get("lease_id") if isinstance(body, dict) else None
        if not isinstance(lease_id, str) or not LEASE_ID.fullmatch(lease_id):
            detail = "Not a BLOOM runtime's dispatch: name the lease granted to this worker"
            return JSONResponse({"ok": False, "detail": detail}, status_code=422)
        started = await self.start(lease_id)
        if isinstance(started, Refusal):
            return JSONResponse({"ok": False, "detail": started.detail}, status_code=started.status)
        return JSONResponse(
            {"ok": True, "accepted": True, "task_id": started.task.id, "detail": "Task accepted"}
        )

    async def clone(self, request: Request) -> JSONResponse:
        """A managed project cloned, or its checkout pulled (one git at a time per path)."""
        refused = self._refused(request)
        if refused is not None:
            return refused
        disabled = self.settings.clone_refused
        if disabled is not None:
            return JSONResponse({"ok": False, "detail": disabled}, status_code=403)
        try:
            try:
                body = await request.json()
            except ValueError:
                raise GitRefused(400, "The body is not JSON") from None
            checkout = Checkout.from_json(body, self.settings.repos_base)
            if checkout.path in self.checkouts:
                raise GitRefused(409, f"A clone or pull of {checkout.path} is under way")
            self.checkouts.add(checkout.path)
            try:
                return JSONResponse(await check_out(checkout))
            finally:
                self.checkouts.discard(checkout.path)
        except GitRefused as exc:
            return JSONResponse({"ok": False, "detail": exc.detail}, status_code=exc.status)

    def _control_refused(self, request: Request) -> JSONResponse | None:
        refused = self._refused(request)
        if refused is not None:
            return refused
        disabled = self.settings.process_control_refused
        if disabled is not None:
            return JSONResponse({"ok": False, "detail": disabled}, status_code=403)
        return None

    async def restart(self, request: Request) -> JSONResponse:
        """Drain, then start again in place; answered before the drain begins."""
        refused = self._control_refused(request)
        if refused is not None:
            return refused
        self.stop(True)
        return JSONResponse(
            {
                "ok": True,
                "method": "exec",
                "init_system": process_control.init_system(),
                "service": process_control.SERVICE,
                "running": self.running(),
                "detail": "Service restart completed: running tasks finish first, then the "
                "worker starts again",
            }
        )

    async def self_update(self, request: Request) -> JSONResponse:
        """Pull and sync the checkout; restart only when every step worked."""
        refused = self._control_refused(request)
        if refused is not None:
            return refused
        try:
            body: Any = await request.json() if await request.body() else {}
        except ValueError:
            body = None
        branch = body.get("branch") if isinstance(body, dict) else None
        if not isinstance(body, dict) or not isinstance(branch, str | None):
            detail = "Expected a JSON object {branch?, repo_url?}"
            return JSONResponse({"ok": False, "detail": detail}, status_code=400)
        checkout = self.settings.checkout or process_control.running_checkout()
        if checkout is None:
            detail = "This bloom does not run from a git checkout (set BLOOM_WORKER_CHECKOUT)"
            return JSONResponse({"ok": False, "steps": [], "detail": detail})
        try:
            answer = await process_control.self_update(
                checkout.expanduser(), branch, self.settings.update_branches
            )
        except GitRefused as exc:
            return JSONResponse({"ok": False, "detail": exc.detail}, status_code=exc.status)
        if answer["ok"]:
            self.stop(True)
        return JSONResponse(answer)

    async def uninstall(self, request: Request) -> JSONResponse:
        """Drain and stop for good (exit 0: the service does not restart it)."""
        refused = self._control_refused(request)
        if refused is not None:
            return refused
        self.stop(False)
        return JSONResponse(
            {
                "ok": True,
                "node_id": self.settings.name,
                "init_system": process_control.init_system(),
                "steps": ["stop claiming", "drain", "exit"],
                "detail": "Agent uninstalled (service stopped; to keep it from starting at "
                f"boot, as root: {process_control.disable_hint()})",
            }
        )


async def _too_large(_: Request, __: Exception) -> Response:
    """A body that grew past the limit while a route read it: the 413 the guard answers."""
    return Response(TOO_LARGE_BODY, 413, media_type="application/json")


class _Server(uvicorn.Server):
    """uvicorn inside the worker's own event loop: the worker keeps its signal handlers."""

    @contextlib.contextmanager
    def capture_signals(self) -> Any:
        yield


@contextlib.asynccontextmanager
async def serving(surface: AgentSurface) -> AsyncIterator[None]:
    """Serve the surface on the configured host and port while the block runs (SettingsError:
    beyond loopback without an agent key, unless insecure)."""
    settings = surface.settings
    assert settings.agent_port is not None
    settings.check_exposure()
    config = uvicorn.Config(
        surface.app(),
        host=settings.agent_host,
        port=settings.agent_port,
        log_level="warning",
        lifespan="off",
        access_log=False,
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started and not task.done():  # noqa: ASYNC110 (uvicorn has no event)
            await asyncio.sleep(0.02)
        if task.done():
            task.result()  # a port in use: raise its error
            raise OSError(f"the agent surface could not listen on port {settings.agent_port}")
        yield
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
