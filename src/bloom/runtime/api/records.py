"""Read-only views: leases, artifacts (and their content), audit, stats."""

from typing import Annotated

from fastapi import APIRouter, Query, Response

from bloom.domain.models import Artifact, AuditEntry, Lease
from bloom.domain.states import LeaseStatus
from bloom.runtime.api.deps import Records
from bloom.runtime.http import JSON
from bloom.runtime.services.records import Stats

router = APIRouter(prefix="/api/runtime", tags=["records"])
MAX_PAGE = 5000
AUDIT_DEFAULT, AUDIT_MAX = 100, 1000


@router.get("/leases", response_model=list[Lease], summary="Leases, newest first")
async def list_leases(
    records: Records,
    status: LeaseStatus | None = None,
    limit: Annotated[int, Query(ge=1)] = 500,
) -> JSON:
    return JSON(await records.leases(status=status, limit=min(limit, MAX_PAGE)))


@router.get("/artifacts", response_model=list[Artifact], summary="Artifacts, newest first")
async def list_artifacts(
    records: Records,
    task_id: str | None = None,
    limit: Annotated[int, Query(ge=1)] = 500,
) -> JSON:
    return JSON(await records.artifacts(task_id=task_id, limit=min(limit, MAX_PAGE)))


@router.get("/artifacts/{artifact_id}", response_model=Artifact, summary="One artifact")
async def get_artifact(artifact_id: str, records: Records) -> JSON:
    return JSON(await records.artifact(artifact_id))


@router.get(
    "/artifacts/{artifact_id}/content",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}, "application/json": {}}}},
    summary="An artifact's content, as stored",
)
async def get_artifact_content(artifact_id: str, records: Records) -> Response:
    content = await records.artifact_content(artifact_id)
    return Response(content.data, media_type=content.media_type)


@router.get("/audit", response_model=list[AuditEntry], summary="Audit entries, newest first")
async def list_audit(
    records: Records,
    limit: Annotated[int, Query(ge=0, description="0 or absent: 100; at most 1000")] = 0,
    task_id: str | None = None,
) -> JSON:
    bounded = min(limit or AUDIT_DEFAULT, AUDIT_MAX)
    return JSON(await records.audit(limit=bounded, task_id=task_id))


@router.get("/stats", response_model=Stats, summary="Counts of tasks, leases and workers")
async def stats(records: Records) -> JSON:
    return JSON(await records.stats())
