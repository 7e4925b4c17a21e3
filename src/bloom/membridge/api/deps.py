"""Route dependencies: the container's services, as `Annotated` aliases."""

from typing import Annotated

from fastapi import Depends, Request

from bloom.membridge.container import Container
from bloom.membridge.services.agents import AgentService
from bloom.membridge.services.fleet import FleetService
from bloom.membridge.services.jobs import JobService
from bloom.membridge.services.projects import ProjectService
from bloom.membridge.services.sync import SyncService


def app_container(request: Request) -> Container:
    built: Container = request.app.state.container
    return built


# Dependencies are coroutines: FastAPI would run plain functions in a thread pool.
async def _container(request: Request) -> Container:
    return app_container(request)


async def _agents(request: Request) -> AgentService:
    return app_container(request).agents


async def _projects(request: Request) -> ProjectService:
    return app_container(request).projects


async def _fleet(request: Request) -> FleetService:
    return app_container(request).fleet


async def _jobs(request: Request) -> JobService:
    return app_container(request).jobs


async def _sync(request: Request) -> SyncService:
    return app_container(request).sync


AppContainer = Annotated[Container, Depends(_container)]
Agents = Annotated[AgentService, Depends(_agents)]
Projects = Annotated[ProjectService, Depends(_projects)]
Fleet = Annotated[FleetService, Depends(_fleet)]
Jobs = Annotated[JobService, Depends(_jobs)]
Sync = Annotated[SyncService, Depends(_sync)]
