"""Route dependencies: the container's services, as `Annotated` aliases."""

from typing import Annotated

from fastapi import Depends, Request

from bloom.domain.errors import Forbidden
from bloom.domain.identity import Identity, Role, open_access
from bloom.runtime.container import Container
from bloom.runtime.services.approvals import ApprovalService
from bloom.runtime.services.attempts import AttemptService
from bloom.runtime.services.budgets import BudgetService
from bloom.runtime.services.config import ConfigService
from bloom.runtime.services.credentials import CredentialService
from bloom.runtime.services.dispatch import Dispatcher
from bloom.runtime.services.events import EventService
from bloom.runtime.services.graphs import GraphService
from bloom.runtime.services.leasing import LeaseService
from bloom.runtime.services.projects import ProjectService
from bloom.runtime.services.records import RecordService
from bloom.runtime.services.tasks import TaskService
from bloom.runtime.services.tool_policies import ToolPolicyService
from bloom.runtime.services.usage import UsageService
from bloom.runtime.services.workers import WorkerService
from bloom.runtime.services.workspaces import WorkspaceService


def app_container(request: Request) -> Container:
    built: Container = request.app.state.container
    return built


# Dependencies are coroutines: FastAPI would run plain functions in a thread pool.
async def container(request: Request) -> Container:
    return app_container(request)


async def _tasks(request: Request) -> TaskService:
    return app_container(request).tasks


async def _leases(request: Request) -> LeaseService:
    return app_container(request).leases


async def _attempts(request: Request) -> AttemptService:
    return app_container(request).attempts


async def _workers(request: Request) -> WorkerService:
    return app_container(request).workers


async def _config(request: Request) -> ConfigService:
    return app_container(request).config


async def _dispatcher(request: Request) -> Dispatcher:
    return app_container(request).dispatcher


async def _records(request: Request) -> RecordService:
    return app_container(request).records


async def _workspaces(request: Request) -> WorkspaceService:
    return app_container(request).workspaces


async def _graphs(request: Request) -> GraphService:
    return app_container(request).graphs


async def _events(request: Request) -> EventService:
    return app_container(request).events


async def _credentials(request: Request) -> CredentialService:
    return app_container(request).credentials


async def _usage(request: Request) -> UsageService:
    return app_container(request).usage


async def _budgets(request: Request) -> BudgetService:
    return app_container(request).budgets


async def _tool_policies(request: Request) -> ToolPolicyService:
    return app_container(request).tool_policies


async def _approvals(request: Request) -> ApprovalService:
    return app_container(request).approvals


async def _projects(request: Request) -> ProjectService:
    return app_container(request).projects


def caller_of(request: Request) -> Identity:
    """Who is calling (`Caller`), for the lease protocol's routes, which take it without a
    dependency: FastAPI solves each dependency anew per request, a fifth of the cycle's CPU."""
    identity: Identity | None = request.scope.get("state", {}).get("identity")
    return identity or open_access(request.client.host if request.client else "")


async def _caller(request: Request) -> Identity:
    return caller_of(request)


Caller = Annotated[Identity, Depends(_caller)]
"""Who is calling (resolved by the identity middleware)."""


def acting_worker(caller: Identity, named: str | None) -> str | None:
    """The worker a call acts for: a worker key acts for its own worker only (403 when it names
    another); other callers act for the worker they name, if any."""
    if caller.role is not Role.WORKER:
        return named
    if named is not None and named != caller.worker_id:
        raise Forbidden(f"This key acts for worker '{caller.worker_id}', not '{named}'")
    return caller.worker_id


Tasks = Annotated[TaskService, Depends(_tasks)]
Leases = Annotated[LeaseService, Depends(_leases)]
Attempts = Annotated[AttemptService, Depends(_attempts)]
Workers = Annotated[WorkerService, Depends(_workers)]
Config = Annotated[ConfigService, Depends(_config)]
Records = Annotated[RecordService, Depends(_records)]
Dispatch = Annotated[Dispatcher, Depends(_dispatcher)]
Events = Annotated[EventService, Depends(_events)]
Workspaces = Annotated[WorkspaceService, Depends(_workspaces)]
Graphs = Annotated[GraphService, Depends(_graphs)]
Credentials = Annotated[CredentialService, Depends(_credentials)]
Usage = Annotated[UsageService, Depends(_usage)]
Budgets = Annotated[BudgetService, Depends(_budgets)]
Projects = Annotated[ProjectService, Depends(_projects)]
ToolPolicies = Annotated[ToolPolicyService, Depends(_tool_policies)]
Approvals = Annotated[ApprovalService, Depends(_approvals)]
AppContainer = Annotated[Container, Depends(container)]
