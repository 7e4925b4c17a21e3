"""Projects: created by operators, or discovered from heartbeats."""

from fastapi import APIRouter, Response

from bloom.membridge.api.deps import Projects
from bloom.membridge.api.schemas import ProjectBody, ProjectOut
from bloom.membridge.rules import ProjectEntry

router = APIRouter(prefix="/projects", tags=["projects"])


@router.get(
    "", response_model=list[ProjectOut], summary="Manual projects, then heartbeat-only ones"
)
async def list_projects(projects: Projects) -> list[ProjectOut]:
    return [ProjectOut.of(entry) for entry in await projects.find()]


@router.post("", status_code=201, response_model=ProjectOut, summary="Create a project by name")
async def create_project(body: ProjectBody, projects: Projects) -> ProjectOut:
    project = await projects.create(body.name)
    entry = ProjectEntry(project.name, project.canonical_id, project.created_at, None, 0, "manual")
    return ProjectOut.of(entry)


# `:path`, so that a name with a "/" (allowed at creation) can be deleted too.
@router.delete("/{name:path}", status_code=204, summary="Delete a manual project by name")
async def remove_project(name: str, projects: Projects) -> Response:
    await projects.remove(name)
    return Response(status_code=204)
