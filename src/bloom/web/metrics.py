"""Prometheus metrics both servers share: HTTP requests by route template (never by raw path, so
ids cannot explode the label set), and rendering a scrape.

The counters and histograms live in this process's registry. Under `bloom runtime serve
--workers N` each process writes them to `PROMETHEUS_MULTIPROC_DIR`, which the serving command
sets, and a scrape of any process sums them all. Gauges of what the database holds are made per
scrape by each server (`extra`), so every process and replica reports the same truth.
"""

import functools
import os
from collections.abc import Iterable
from typing import Any

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The classic text format, which every Prometheus (and its look-alikes) reads."""
UNMATCHED = "unmatched"

HTTP_REQUESTS = Counter(
    "bloom_http_requests_total",
    "HTTP requests answered, by server, method, route template and status.",
    ["server", "method", "route", "status"],
)
HTTP_SECONDS = Histogram(
    "bloom_http_request_duration_seconds",
    "Time to answer an HTTP request (to its last byte), by server, method and route template.",
    ["server", "method", "route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)


@functools.lru_cache(maxsize=4096)  # bounded: route templates, methods and statuses are few
def _request_series(server: str, method: str, route: str, status: int) -> tuple[Any, Any]:
    """The two series one kind of request counts in (labels() checks and locks per call)."""
    return (
        HTTP_REQUESTS.labels(server, method, route, str(status)),
        HTTP_SECONDS.labels(server, method, route),
    )


def observe_request(server: str, method: str, route: str, status: int, seconds: float) -> None:
    count, duration = _request_series(server, method, route, status)
    count.inc()
    duration.observe(seconds)


class _Fixed(Collector):
    def __init__(self, metrics: tuple[Metric, ...]):
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self.metrics


def families(*metrics: Metric) -> CollectorRegistry:
    """A registry of ready-made metric families (a server's gauges, made for one scrape)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(metrics))
    return registry


def render(extra: CollectorRegistry | None = None) -> bytes:
    """This process's metrics (or every process's, when they share a multiprocess dir), then
    `extra`'s."""
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry = REGISTRY
    body = generate_latest(registry)
    return body + generate_latest(extra) if extra is not None else body
