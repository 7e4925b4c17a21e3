"""Read-only views: leases, artifacts (and their content), audit, stats."""

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse

from bloom.domain.models import Artifact, AuditEntry, Lease
from bloom.domain.states import LeaseStatus
from bloom.runtime.api.deps import Records
from bloom.runtime.http import JSON
from bloom.runtime.services.records import Stats
from bloom.web.head import is_head
from bloom.web.ranges import RangeNotSatisfiable, parse_range

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
    responses={
        200: {"content": {"text/plain": {}, "application/json": {}}},
        206: {"description": "The byte range the Range header asked for"},
        416: {"description": "The range starts beyond the content"},
    },
    summary="An artifact's content, streamed from its store (Range and ETag honoured)",
)
async def get_artifact_content(artifact_id: str, records: Records, request: Request) -> Response:
    content = await records.artifact_content(artifact_id)
    headers = {"Accept-Ranges": "bytes"}
    if content.sha256:
        headers["ETag"] = f'"{content.sha256}"'
        if request.headers.get("if-none-match") == headers["ETag"]:
            return Response(status_code=304, headers=headers)
    try:
        wanted = parse_range(request.headers.get("range"), content.size)
    except RangeNotSatisfiable:
        headers["Content-Range"] = f"bytes */{content.size}"
        return Response(status_code=416, headers=headers)
    first, last, status = 0, content.size - 1, 200
    if wanted is not None:
        first, last, status = wanted.first, wanted.last, 206
        headers["Content-Range"] = wanted.content_range(content.size)
    headers["Content-Length"] = str(last - first + 1)
    if is_head(request.scope) or content.size == 0:
        return Response(status_code=status, headers=headers, media_type=content.media_type)
    chunks = await content.open(first, last)
    return StreamingResponse(chunks, status, headers, media_type=content.media_type)


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
