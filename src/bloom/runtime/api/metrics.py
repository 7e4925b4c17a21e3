"""`GET /metrics`: Prometheus' text format."""

from fastapi import APIRouter, Response
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily

from bloom.runtime.api.deps import AppContainer
from bloom.runtime.services.metrics import Snapshot
from bloom.web.metrics import CONTENT_TYPE, families, render

router = APIRouter(tags=["system"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}}},
    summary="Prometheus metrics: queue, workers, leases, outcomes, HTTP",
)
async def metrics(container: AppContainer) -> Response:
    return Response(render(gauges(await container.metrics.snapshot())), media_type=CONTENT_TYPE)


def gauges(snapshot: Snapshot) -> CollectorRegistry:
    """The snapshot as gauge families, made for this scrape only (never the file-backed gauges
    of multiprocess mode)."""
    tasks = GaugeMetricFamily(
        "bloom_tasks", "Tasks by status (queued: the queue depth).", labels=["status"]
    )
    for status, count in snapshot.tasks.items():
        tasks.add_metric([status], count)
    workers = GaugeMetricFamily("bloom_workers", "Workers by status.", labels=["status"])
    for status, count in snapshot.workers.items():
        workers.add_metric([status], count)
    free = GaugeMetricFamily(
        "bloom_worker_free_slots",
        "Free slots of online, unpaused Claude workers.",
        value=snapshot.free_slots,
    )
    leases = GaugeMetricFamily(
        "bloom_leases_active", "Active leases.", value=snapshot.leases_active
    )
    stalled = GaugeMetricFamily(
        "bloom_leases_stalled",
        "Active leases whose run is stalled: no output past its stall_sec, heartbeats going on.",
        value=snapshot.leases_stalled,
    )
    approvals = GaugeMetricFamily(
        "bloom_approvals_pending",
        "Tool calls waiting for a person's decision (docs/approvals.md).",
        value=snapshot.approvals_pending,
    )
    return families(tasks, workers, free, leases, stalled, approvals)
