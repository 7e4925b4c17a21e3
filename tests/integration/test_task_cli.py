"""A task's agent CLI on the runtime's side, on both databases: `cli` taken at create (claude by
default, an unknown name a 400 naming `cli`) and in the batch, kept and answered; a task goes
only to a worker that has its CLI (a worker that reports no `clis` has Claude only), even the
context's sticky worker; one that no online worker can run says so (`waiting_for`); the list
filtered by CLI (`GET /llm-tasks?cli=`)."""

from typing import Any

import httpx
import pytest

from tests.support.api import API, claim, create_task, register_worker, success


async def worker_with(client: httpx.AsyncClient, name: str, **clis: str) -> None:
    caps = {"claude_cli": True, "max_concurrency": 2, "clis": clis}
    await register_worker(client, name, capabilities=caps)


async def test_cli_is_taken_kept_and_answered(client: httpx.AsyncClient) -> None:
    plain = await create_task(client)
    assert plain["cli"] == "claude"
    codex = await create_task(client, context_id="ctx-2", cli="codex")
    assert codex["cli"] == "codex"
    read = (await client.get(f"{API}/llm-tasks/{codex['id']}")).json()
    assert read["cli"] == "codex"
    batch = await client.post(
        f"{API}/llm-tasks/batch",
        json={
            "tasks": [
                {"context_id": "b1", "agent_slug": "default", "prompt": "p", "cli": "gemini"},
                {"context_id": "b2", "agent_slug": "default", "prompt": "p"},
            ]
        },
    )
    assert batch.status_code in (200, 201), batch.text
    assert [task["cli"] for task in batch.json()["tasks"]] == ["gemini", "claude"]


@pytest.mark.parametrize("cli", ["aider", "", 3, None])
async def test_an_unknown_cli_is_a_400_naming_it(client: httpx.AsyncClient, cli: Any) -> None:
    body = {"context_id": "c", "agent_slug": "default", "prompt": "p", "cli": cli}
    response = await client.post(f"{API}/llm-tasks", json=body)
    assert response.status_code == 400, response.text
    assert "cli" in response.text
    batch = await client.post(f"{API}/llm-tasks/batch", json={"tasks": [body]})
    assert batch.status_code == 400, batch.text
    assert "cli" in batch.text


async def test_a_task_goes_only_to_a_worker_with_its_cli(client: httpx.AsyncClient) -> None:
    await register_worker(client, "old", slots=2)  # reports no clis: Claude only
    await worker_with(client, "cx", codex="0.1.0")
    codex = await create_task(client, context_id="c-codex", cli="codex", priority=5)
    gemini = await create_task(client, context_id="c-gemini", cli="gemini", priority=4)
    claude = await create_task(client, context_id="c-claude")
    first = await claim(client, "old")
    assert first is not None
    assert first["task"]["id"] == claude["id"]  # the better codex task is not for it
    assert await claim(client, "old") is None
    taken = await claim(client, "cx")
    assert taken is not None
    assert taken["task"]["id"] == codex["id"]
    assert await claim(client, "cx") is None  # neither gemini's nor claude's
    waiting = (await client.get(f"{API}/llm-tasks/{gemini['id']}")).json()
    assert waiting["status"] == "queued"
    assert waiting["waiting_for"] == {"reason": "no_worker_with_cli", "cli": "gemini"}
    page = await client.get(f"/tasks/{gemini['id']}")
    assert "no online worker has the" in page.text
    assert "gemini" in page.text
    await worker_with(client, "gm", gemini="0.2.0", claude="2.1.330")
    assert "waiting_for" not in (await client.get(f"{API}/llm-tasks/{gemini['id']}")).json()
    got = await claim(client, "gm")
    assert got is not None
    assert got["task"]["id"] == gemini["id"]


async def test_the_sticky_worker_keeps_no_task_of_a_cli_it_lacks(
    client: httpx.AsyncClient,
) -> None:
    await worker_with(client, "claude-only", claude="2.1.330")
    await worker_with(client, "both", claude="2.1.330", codex="0.1.0")
    first = await create_task(client, context_id="shared")
    grant = await claim(client, "claude-only")
    assert grant is not None
    assert grant["task"]["id"] == first["id"]
    done = await client.post(
        f"{API}/llm-tasks/{first['id']}/complete",
        json=success(lease_id=grant["lease"]["id"], worker_id="claude-only"),
    )
    assert done.status_code == 200, done.text
    # the context's next task is Codex's: not kept for claude-only, so "both" takes it at once
    follow = await create_task(client, context_id="shared", cli="codex")
    taken = await claim(client, "both")
    assert taken is not None
    assert taken["task"]["id"] == follow["id"]
    # while a Claude task of a context claude-only holds is kept for it
    await create_task(client, context_id="other")
    held = await claim(client, "claude-only")
    assert held is not None
    assert (
        await client.post(
            f"{API}/llm-tasks/{held['task']['id']}/complete",
            json=success(lease_id=held["lease"]["id"], worker_id="claude-only"),
        )
    ).status_code == 200
    await create_task(client, context_id="other")
    assert await claim(client, "both") is None


async def test_a_worker_reporting_clis_without_claude_gets_no_claude_task(
    client: httpx.AsyncClient,
) -> None:
    await worker_with(client, "codex-only", codex="0.1.0")
    task = await create_task(client)
    assert await claim(client, "codex-only") is None
    waiting = (await client.get(f"{API}/llm-tasks/{task['id']}")).json()
    assert waiting["waiting_for"] == {"reason": "no_worker_with_cli", "cli": "claude"}


async def test_the_task_list_filters_by_cli(client: httpx.AsyncClient) -> None:
    made = {
        cli: [(await create_task(client, context_id=f"{cli}-{n}", cli=cli))["id"] for n in range(2)]
        for cli in ("claude", "codex")
    }
    await worker_with(client, "cx", codex="0.1.0")
    leased = await claim(client, "cx")
    assert leased is not None

    async def listed(**params: str) -> list[str]:
        response = await client.get(f"{API}/llm-tasks", params=params)
        assert response.status_code == 200, response.text
        return [task["id"] for task in response.json()]

    assert await listed(cli="codex") == made["codex"][::-1]
    assert await listed(cli="claude") == made["claude"][::-1]
    assert await listed(cli="gemini") == []
    assert await listed(cli="codex", status="leased") == [leased["task"]["id"]]
    assert await listed(cli="claude", status="leased") == []
    assert set(await listed()) == {*made["claude"], *made["codex"]}
    unknown = await client.get(f"{API}/llm-tasks", params={"cli": "aider"})
    assert unknown.status_code == 400, unknown.text
    assert "cli" in unknown.text
