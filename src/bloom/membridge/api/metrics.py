"""`GET /metrics`: Prometheus' text format."""

from fastapi import APIRouter, Response
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily

from bloom.membridge.api.deps import AppContainer
from bloom.membridge.services.metrics import Snapshot
from bloom.web.metrics import CONTENT_TYPE, families, render

router = APIRouter(tags=["system"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}}},
    summary="Prometheus metrics: agents, nodes, projects, sync jobs, HTTP",
)
async def metrics(container: AppContainer) -> Response:
    return Response(render(gauges(await container.metrics.snapshot())), media_type=CONTENT_TYPE)


def gauges(snapshot: Snapshot) -> CollectorRegistry:
    agents = GaugeMetricFamily(
        "bloom_membridge_agents", "Registered agents by status.", labels=["status"]
    )
    for status, count in snapshot.agents.items():
        agents.add_metric([status], count)
    nodes = GaugeMetricFamily(
        "bloom_membridge_nodes", "Nodes that heartbeat, over all projects.", value=snapshot.nodes
    )
    projects = GaugeMetricFamily(
        "bloom_membridge_projects", "Manual projects.", value=snapshot.projects
    )
    jobs = GaugeMetricFamily("bloom_membridge_jobs", "Sync jobs by status.", labels=["status"])
    for status, count in snapshot.jobs.items():
        jobs.add_metric([status], count)
    return families(agents, nodes, projects, jobs)
