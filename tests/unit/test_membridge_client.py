"""The runtime's Membridge client: the seed's retry, backoff and connection-state rules
(REFERENCE_BEHAVIOUR §1.9), driven through an injected transport that answers as told."""

from collections.abc import Callable

import httpx
import pytest

from bloom.clients.membridge import (
    ADMIN_HEADER,
    MembridgeClient,
    MembridgeContractError,
    MembridgeUnavailable,
)
from tests.support.clock import FakeClock

Handler = Callable[[httpx.Request], httpx.Response]


class Upstream:
    """Answers requests from a script of replies (a response, or an exception to raise)."""

    def __init__(self, *replies: httpx.Response | Exception):
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


def make_client(upstream: Upstream, clock: FakeClock, sleeps: list[float]) -> MembridgeClient:
    async def credentials() -> tuple[str, str]:
        return "http://membridge:8000/", "admin-key-123"

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    return MembridgeClient(credentials, clock, transport=httpx.MockTransport(upstream), sleep=sleep)


async def test_success_resets_the_state_and_sends_the_admin_key(clock: FakeClock) -> None:
    upstream = Upstream(httpx.Response(200, json={"status": "ok"}))
    sleeps: list[float] = []
    client = make_client(upstream, clock, sleeps)
    response = await client.request("GET", "/health")
    assert response.json() == {"status": "ok"}
    assert upstream.requests[0].url == "http://membridge:8000/health"
    assert upstream.requests[0].headers[ADMIN_HEADER] == "admin-key-123"
    assert client.state.as_json() == {
        "consecutiveFailures": 0,
        "lastSuccess": clock.now,
        "lastError": None,
        "connected": True,
    }
    assert sleeps == []


async def test_a_4xx_is_an_answer_not_a_failure_and_is_not_retried(clock: FakeClock) -> None:
    upstream = Upstream(httpx.Response(404, json={"detail": "nope"}))
    client = make_client(upstream, clock, [])
    assert (await client.request("GET", "/agents/x")).status_code == 404
    assert len(upstream.requests) == 1
    assert client.state.connected


async def test_5xx_is_retried_with_backoff_and_the_last_one_returned(clock: FakeClock) -> None:
    upstream = Upstream(*[httpx.Response(503) for _ in range(4)])
    sleeps: list[float] = []
    client = make_client(upstream, clock, sleeps)
    response = await client.request("GET", "/agents")
    assert response.status_code == 503
    assert len(upstream.requests) == 4
    for attempt, pause in enumerate(sleeps, start=1):  # 500, 1000, 2000 ms, plus < 30 %
        base = 0.5 * 2 ** (attempt - 1)
        assert base <= pause < base * 1.3
    assert len(sleeps) == 3
    # a 5xx leaves the connection state as it was (the seed's rule), but says why
    assert client.state.consecutiveFailures == 0
    assert client.state.lastSuccess is None
    assert client.state.lastError == "HTTP 503: Service Unavailable"


async def test_network_errors_count_per_attempt_then_raise(clock: FakeClock) -> None:
    refused = httpx.ConnectError("[Errno 111] Connection refused")
    upstream = Upstream(refused, refused)
    client = make_client(upstream, clock, [])
    with pytest.raises(MembridgeUnavailable, match="Connection refused"):
        await client.request("GET", "/agents", retries=1)
    assert client.state.consecutiveFailures == 2
    assert not client.state.connected
    assert "admin-key-123" not in (client.state.lastError or "")


async def test_a_timeout_is_reported_with_its_length(clock: FakeClock) -> None:
    upstream = Upstream(httpx.ReadTimeout("slow"))
    client = make_client(upstream, clock, [])
    with pytest.raises(MembridgeUnavailable):
        await client.request("GET", "/health", retries=0, timeout_sec=8)
    assert client.state.lastError == "Timeout after 8000ms"


async def test_recovery_after_failures_clears_them(clock: FakeClock) -> None:
    refused = httpx.ConnectError("refused")
    upstream = Upstream(refused, refused, httpx.Response(200, json=[]))
    client = make_client(upstream, clock, [])
    with pytest.raises(MembridgeUnavailable):
        await client.request("GET", "/agents", retries=1)
    assert client.state.consecutiveFailures == 2
    clock.advance(10)
    await client.request("GET", "/agents")
    assert client.state.as_json() == {
        "consecutiveFailures": 0,
        "lastSuccess": clock.now,
        "lastError": None,
        "connected": True,
    }


async def test_the_workers_calls_parse_membridges_answer(clock: FakeClock) -> None:
    """A refusal is None (the reference refuses an agent without a url); an answer of another
    shape is a MembridgeContractError naming the field."""
    upstream = Upstream(
        httpx.Response(422, json={"detail": "url required"}),
        httpx.Response(201, json={"name": "w1", "status": "online", "capabilities": {}}),
        httpx.Response(200, json={"ok": True, "canonical_id": "c1", "rol": "primary"}),
    )
    client = make_client(upstream, clock, [])
    assert await client.register_agent({"name": "w1"}) is None
    with pytest.raises(MembridgeContractError, match="POST /agents: url: missing"):
        await client.register_agent({"name": "w1"})
    with pytest.raises(MembridgeContractError, match="POST /agent/heartbeat: role: missing"):
        await client.node_heartbeat({"node_id": "w1", "canonical_id": "c1"})
