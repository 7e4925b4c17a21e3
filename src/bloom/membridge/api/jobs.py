"""The sync jobs log."""

from typing import Annotated

from fastapi import APIRouter, Query

from bloom.membridge.api.deps import Jobs
from bloom.membridge.api.schemas import JobOut

router = APIRouter(prefix="/jobs", tags=["jobs"])


@router.get("", response_model=list[JobOut], summary="Newest jobs first, of one project if given")
async def list_jobs(
    jobs: Jobs,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    project: Annotated[str | None, Query(max_length=128)] = None,
) -> list[JobOut]:
    return [JobOut.of(job) for job in await jobs.find(limit=limit, project=project or None)]


@router.get("/{job_id}", response_model=JobOut, summary="One job")
async def get_job(job_id: str, jobs: Jobs) -> JobOut:
    return JobOut.of(await jobs.get(job_id))
