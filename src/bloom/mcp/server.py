"""`bloom mcp`: the fleet in a Claude session's hands, over the Model Context Protocol on stdio.

Built on the official SDK (`mcp`): each tool is a typed function, its docstring the description
the model reads and its annotated parameters the input schema. Every tool calls the runtime
through the typed client with the session's key; a refusal or an unreachable runtime comes back
as a tool error carrying the runtime's own words, never as a crash of the server. A key that may
only read (a viewer key) is offered the read tools only, and the server's instructions say so.
"""

import sys
from collections.abc import Awaitable
from typing import Annotated, Any, Literal, TypeVar

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import ResourceLink, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from bloom import __version__
from bloom.clients.runtime import (
    RuntimeApiError,
    RuntimeClient,
    RuntimeContractError,
    RuntimeUnreachable,
)
from bloom.clients.wire import answers
from bloom.domain.approvals import Decision
from bloom.domain.identity import Role
from bloom.domain.states import TaskStatus
from bloom.mcp.fleet import INLINE_CHARS, MAX_WAIT_SEC, Fleet, Output, artifact_uri

T = TypeVar("T")

INSTRUCTIONS = (
    "BLOOM Runtime runs Claude CLI tasks on a fleet of the user's own machines. Queue work with "
    "submit_task, follow it with wait_task (the remote output arrives as progress), read the "
    "answer with get_task or get_artifact. Tasks that share a context_id run on the same worker "
    "and continue one Claude session, so give related steps one context_id."
)
READ_ONLY = (
    " This session's key may only read: submit_task and cancel_task are not offered; ask the "
    "user for a key that may write to queue or cancel work."
)
READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)

TaskId = Annotated[str, Field(description="The task's id, as submit_task or list_tasks gave it.")]


class GraphTask(BaseModel):
    """One task of a graph (`submit_graph`)."""

    prompt: str = Field(min_length=1, description="What Claude should do.")
    ref: str | None = Field(None, description="Its name in the graph, for depends_on.")
    depends_on: list[str] | None = Field(
        None, description="Refs of other tasks of the graph, or ids of existing tasks."
    )
    dependency_artifacts: list[str] | None = Field(
        None,
        description="Of depends_on, those whose artifacts (a repository task's patch) are "
        "passed on too, not only their answers.",
    )
    context_id: str | None = Field(None, description="Omit for a fresh context.")
    agent_slug: str | None = Field(None, description="The project; default by default.")
    on_dependency_failure: Literal["cancel", "run"] | None = None
    priority: int | None = None


async def answer(call: Awaitable[T], runtime_url: str) -> T:
    """The runtime's answer, or a tool error in its words."""
    try:
        return await call
    except RuntimeContractError as exc:
        raise ToolError(f"the runtime's answer does not fit this bloom: {exc.message}") from None
    except RuntimeApiError as exc:
        raise ToolError(f"the runtime refused ({exc.status}): {exc.message}") from None
    except RuntimeUnreachable as exc:
        raise ToolError(f"cannot reach the runtime at {runtime_url}: {exc}") from None


class Tools:
    """The tools, each a method the SDK reads as a typed function (its docstring the
    description, its annotated parameters the input schema)."""

    def __init__(self, fleet: Fleet):
        self.fleet = fleet
        self.url = fleet.client.base_url

    async def _answer(self, call: Awaitable[T]) -> T:
        return await answer(call, self.url)

    async def submit_task(
        self,
        prompt: Annotated[str, Field(min_length=1, description="What Claude should do.")],
        context_id: Annotated[
            str | None,
            Field(
                description="Tasks of one context run on one worker and continue its Claude "
                "session. Omit for a fresh context."
            ),
        ] = None,
        agent_slug: Annotated[
            str, Field(description="The project (agent) the task belongs to.")
        ] = "default",
        priority: Annotated[
            int | None, Field(description="Higher runs sooner; 0 by default.")
        ] = None,
        timeout_sec: Annotated[
            int | None, Field(ge=1, description="Seconds one attempt may run.")
        ] = None,
        budget_usd: Annotated[
            float | None, Field(ge=0, description="USD one attempt may spend; 0 means no cap.")
        ] = None,
        idempotency_key: Annotated[
            str | None,
            Field(
                description="Submitting again with the same key returns the same task instead "
                "of queueing a second one."
            ),
        ] = None,
        depends_on: Annotated[
            list[str] | None,
            Field(
                description="Ids of tasks to wait for: this one stays blocked until they "
                "complete, then runs with their answers before its prompt."
            ),
        ] = None,
        on_dependency_failure: Annotated[
            Literal["cancel", "run"] | None,
            Field(description="When a dependency fails: cancel this task (default) or run it."),
        ] = None,
        dependency_artifacts: Annotated[
            list[str] | None,
            Field(
                description="Of depends_on, those whose artifacts (a repository task's patch) "
                "are passed on too, not only their answers."
            ),
        ] = None,
        cli: Annotated[
            Literal["claude", "codex", "gemini"] | None,
            Field(
                description="The agent CLI that runs it (claude by default); only a worker "
                "that has it takes it."
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Queue a task for the fleet: a worker runs the prompt with the Claude CLI on its own
        machine. Returns the queued task (its id, status); follow it with wait_task."""
        return await self._answer(
            self.fleet.submit(
                prompt,
                context_id=context_id,
                agent_slug=agent_slug,
                priority=priority,
                timeout_sec=timeout_sec,
                budget_usd=budget_usd,
                idempotency_key=idempotency_key,
                depends_on=depends_on,
                on_dependency_failure=on_dependency_failure,
                dependency_artifacts=dependency_artifacts,
                cli=cli,
            )
        )

    async def submit_graph(
        self,
        tasks: Annotated[
            list[GraphTask],
            Field(min_length=1, max_length=1_000, description="The graph's tasks, in one batch."),
        ],
    ) -> list[dict[str, Any]]:
        """Queue a whole graph of tasks in one call, all or none: give each a `ref`, and name
        earlier refs (or ids of existing tasks) in `depends_on`. A task waits (blocked) until
        its dependencies complete, then runs with their answers before its prompt; fan out
        (several tasks after one) and fan in (one after several). Returns the tasks in order;
        follow the last with wait_task."""
        bodies = [task.model_dump(exclude_none=True) for task in tasks]
        return await self._answer(self.fleet.submit_graph(bodies))

    async def get_task(self, task_id: TaskId) -> dict[str, Any]:
        """One task: its status, worker, attempts and last error; once it has ended, its output
        (inline up to a size, else the URI of its artifact resource) and, for a task that
        changes a repository, its `change` (branch, commits, counts, push, the patch's URI)."""
        return await self._answer(self.fleet.task(task_id))

    async def list_tasks(
        self,
        status: Annotated[
            TaskStatus | None, Field(description="Only tasks in this status.")
        ] = None,
        limit: Annotated[int, Field(ge=1, le=200, description="At most this many.")] = 20,
    ) -> list[dict[str, Any]]:
        """Tasks, newest first, optionally of one status."""
        return await self._answer(self.fleet.tasks(str(status) if status else None, limit))

    async def wait_task(
        self,
        task_id: TaskId,
        ctx: Context,
        timeout_sec: Annotated[
            float,
            Field(gt=0, le=MAX_WAIT_SEC, description="Give up waiting after this many seconds."),
        ] = 300,
    ) -> dict[str, Any]:
        """Wait for a task to end, passing on its live output as progress notifications. Returns
        the task with its output once it has ended; after the timeout, the task as it is then
        (`done: false`): call again to keep waiting. Waiting never cancels the task."""

        async def progress(count: float, line: str) -> None:
            await ctx.report_progress(count, None, line)

        return await self._answer(self.fleet.wait(task_id, timeout_sec, progress))

    async def cancel_task(self, task_id: TaskId) -> dict[str, Any]:
        """Cancel a task: a queued one at once, a running one when its worker next reports
        (its run is stopped). An ended task cannot be cancelled."""
        return await self._answer(self.fleet.cancel(task_id))

    async def get_artifact(
        self,
        task_id: Annotated[
            str | None, Field(description="The task whose newest artifact (its answer) to read.")
        ] = None,
        artifact_id: Annotated[str | None, Field(description="Or one artifact by its id.")] = None,
    ) -> list[TextContent | ResourceLink]:
        if (task_id is None) == (artifact_id is None):
            raise ToolError("give exactly one of task_id and artifact_id")
        if artifact_id is not None:
            output: Output | None = await self._answer(self.fleet.artifact_by_id(artifact_id))
        else:
            output = await self._answer(self.fleet.output(task_id or ""))
        if output is None:
            raise ToolError(f"task {task_id} has no artifact yet (it has not completed)")
        if output.text is not None:
            return [TextContent(type="text", text=output.text)]
        return [
            ResourceLink(
                type="resource_link",
                uri=artifact_uri(output.artifact.id),
                name=f"artifact {output.artifact.id}",
                description=f"{output.size_bytes:,} bytes: read the resource",
                mime_type="text/plain",
            )
        ]

    async def list_workers(self) -> list[dict[str, Any]]:
        """The fleet's workers: status, leases held against their concurrency, last heartbeat."""
        return await self._answer(self.fleet.workers())

    async def list_approvals(
        self,
        status: Annotated[
            str | None,
            Field(description="pending (the default), approved, denied or expired; all: omit."),
        ] = "pending",
        task_id: Annotated[str | None, Field(description="Only this task's.")] = None,
    ) -> list[dict[str, Any]]:
        """Tool calls the fleet's agents wait on a person's decision for (a task's `ask`
        rules): each with its task, the call (tool and input, and a one-line summary), when it
        was asked and when it expires."""
        found = await self._answer(self.fleet.client.approvals(status=status, task_id=task_id))
        return [dict(approval) for approval in found]

    async def decide_approval(
        self,
        approval_id: Annotated[str, Field(description="The approval's id (list_approvals).")],
        decision: Annotated[Decision, Field(description="approve or deny.")],
        note: Annotated[
            str | None, Field(description="Why; a denial's note is told to the agent.")
        ] = None,
        remember: Annotated[
            bool,
            Field(description="Approve this same call in the task's context from now on."),
        ] = False,
    ) -> dict[str, Any]:
        """Approve or deny one pending tool call, once: its task resumes where it stopped and
        runs exactly that call (approve), or goes on told of the denial and the note."""
        decided = self.fleet.client.decide_approval(
            approval_id, str(decision), note=note, remember=remember
        )
        return dict(await self._answer(decided))

    async def fleet_status(self) -> dict[str, Any]:
        """The fleet at a glance: tasks queued and in flight, workers online, free slots, and
        what today's work cost (since 00:00 UTC, in all and for the costliest projects)."""
        return await self._answer(self.fleet.status())


def build_server(fleet: Fleet, *, can_write: bool, can_decide: bool | None = None) -> MCPServer:
    """The server with its tools and resources; the writing tools only when `can_write`,
    `decide_approval` only when `can_decide` (default: as `can_write`)."""
    server = MCPServer(
        "bloom",
        version=__version__,
        instructions=INSTRUCTIONS + ("" if can_write else READ_ONLY),
        log_level="WARNING",
    )

    tools = Tools(fleet)
    for tool in (
        tools.get_task,
        tools.list_tasks,
        tools.wait_task,
        tools.list_workers,
        tools.list_approvals,
        tools.fleet_status,
    ):
        server.add_tool(tool, annotations=READ)
    server.add_tool(
        tools.get_artifact,
        annotations=READ,
        description=f"A task's answer as stored: the text itself up to {INLINE_CHARS:,} "
        "characters, beyond that a link to its resource (bloom://artifacts/ID). Give task_id "
        "or artifact_id.",
    )
    if can_write:
        server.add_tool(tools.submit_task)
        server.add_tool(tools.submit_graph)
        server.add_tool(tools.cancel_task, annotations=ToolAnnotations(destructive_hint=True))
    if can_write if can_decide is None else can_decide:
        server.add_tool(tools.decide_approval)

    @server.resource("bloom://artifacts/{artifact_id}", mime_type="text/plain")
    async def artifact(artifact_id: str) -> str:
        """A stored artifact's content: a task's answer."""
        return await _resource(fleet.client.artifact_content(artifact_id))

    @server.resource("bloom://tasks/{task_id}/result", mime_type="text/plain")
    async def task_result(task_id: str) -> str:
        """A task's answer: its newest artifact's content (an error until it has one)."""
        artifacts = answers(await _resource(fleet.client.artifacts(task_id)))
        if not artifacts:
            raise ResourceError(f"task {task_id} has no result yet")
        return await _resource(fleet.client.artifact_content(artifacts[0].id))

    return server


async def _resource(call: Awaitable[T]) -> T:
    try:
        return await call
    except (RuntimeApiError, RuntimeUnreachable) as exc:
        raise ResourceError(str(exc)) from None


async def serve_stdio(url: str, api_key: str) -> None:
    """Serve MCP on standard input and output until the client goes away."""
    async with RuntimeClient(url, api_key) as client:
        role = await role_of(client)
        can_write = role in (None, Role.ADMIN)
        can_decide = role in (None, Role.ADMIN, Role.APPROVER)
        server = build_server(Fleet(client), can_write=can_write, can_decide=can_decide)
        await server.run_stdio_async()


async def role_of(client: RuntimeClient) -> Role | None:
    """The key's role: an admin's may queue and cancel work, an approver's decide approvals.
    None when the runtime cannot say (it is down, or refuses the key): every tool is then
    offered and each call reports the trouble; a line on standard error (the client's log)
    says so now."""
    try:
        caller = await client.whoami()
    except (RuntimeApiError, RuntimeUnreachable) as exc:
        print(
            f"bloom mcp: cannot ask the runtime at {client.base_url} who this key is: {exc}",
            file=sys.stderr,
        )
        return None
    if caller.role is None:
        print(
            f"bloom mcp: the runtime at {client.base_url} does not accept this key: set "
            "BLOOM_API_KEY (or RUNTIME_API_KEY)",
            file=sys.stderr,
        )
        return None
    return Role(caller.role)
