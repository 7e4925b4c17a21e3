"""The runtime client rides out what an outage looks like from outside: a 503 with Retry-After
is waited out and tried again (a 503 without it is an answer), and a replica that refuses the
connection is passed over for the next URL, where the client then stays."""

import asyncio

import httpx
import pytest

from bloom.clients.runtime import RuntimeApiError, RuntimeClient, RuntimeUnreachable, replica_urls


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    waited: list[float] = []

    async def sleep(seconds: float) -> None:
        waited.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    return waited


async def test_a_503_with_retry_after_is_waited_out(no_waiting: list[float]) -> None:
    answers = [httpx.Response(503, headers={"Retry-After": "2"}, json={"error": "down"})] * 2
    answers.append(httpx.Response(200, json=[]))
    transport = httpx.MockTransport(lambda request: answers.pop(0))
    async with RuntimeClient("http://runtime", transport=transport) as client:
        assert await client.list_workers() == []
    assert len(no_waiting) == 2
    assert all(2.0 <= wait <= 2.4 for wait in no_waiting)  # jitter: up to a fifth more


async def test_a_503_without_retry_after_is_an_answer(no_waiting: list[float]) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(503, json={"error": "busy"}))
    async with RuntimeClient("http://runtime", transport=transport) as client:
        with pytest.raises(RuntimeApiError, match="busy"):
            await client.list_workers()
    assert no_waiting == []


async def test_a_refused_replica_is_passed_over_for_the_next() -> None:
    asked: list[str] = []

    def replicas(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.host)
        if request.url.host == "a":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json=[])

    transport = httpx.MockTransport(replicas)
    async with RuntimeClient("http://a:5000, http://b:5000/", transport=transport) as client:
        await client.list_workers()
        await client.list_workers()
        assert client.base_url == "http://b:5000"
    assert asked == ["a", "b", "b"]


async def test_every_replica_refusing_is_unreachable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    transport = httpx.MockTransport(refuse)
    async with RuntimeClient("http://a,http://b", transport=transport) as client:
        with pytest.raises(RuntimeUnreachable):
            await client.list_workers()


def test_replica_urls() -> None:
    assert replica_urls("http://a/") == ["http://a"]
    assert replica_urls("http://a, http://b ,") == ["http://a", "http://b"]
