"""Route dependencies: the container's services, as `Annotated` aliases."""

from typing import Annotated

from fastapi import Depends, Request

from bloom.runtime.container import Container
from bloom.services.completion import CompletionService
from bloom.services.config import ConfigService
from bloom.services.leasing import LeaseService
from bloom.services.records import RecordService
from bloom.services.tasks import TaskService
from bloom.services.workers import WorkerService


def container(request: Request) -> Container:
    built: Container = request.app.state.container
    return built


def _tasks(request: Request) -> TaskService:
    return container(request).tasks


def _leases(request: Request) -> LeaseService:
    return container(request).leases


def _completion(request: Request) -> CompletionService:
    return container(request).completion


def _workers(request: Request) -> WorkerService:
    return container(request).workers


def _config(request: Request) -> ConfigService:
    return container(request).config


def _records(request: Request) -> RecordService:
    return container(request).records


Tasks = Annotated[TaskService, Depends(_tasks)]
Leases = Annotated[LeaseService, Depends(_leases)]
Completions = Annotated[CompletionService, Depends(_completion)]
Workers = Annotated[WorkerService, Depends(_workers)]
Config = Annotated[ConfigService, Depends(_config)]
Records = Annotated[RecordService, Depends(_records)]
AppContainer = Annotated[Container, Depends(container)]
