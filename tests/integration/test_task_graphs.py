"""Task graphs through the HTTP API on both databases (docs/graphs.md): graphs made in one batch
(chain, fan-out, fan-in, diamond), `blocked` until the last dependency completes and queued in
that complete, the answers passed on at the grant, refusals naming the field, a dependency that
fails under each policy, cancel propagation, requeue putting dependents back, replays and racing
completes releasing once, the graph endpoint, the list filter and the counts."""

import asyncio
from typing import Any

import httpx
import pytest

from bloom.domain.graph import MAX_BATCH_DEPENDENCIES, MAX_DEPENDENCIES
from tests.support.api import API, claim, create_task, failure, register_worker, success
from tests.support.sent import Sent


def task(prompt: str, ref: str | None = None, *after: str, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"context_id": f"ctx-{prompt}", "agent_slug": "a", "prompt": prompt}
    if ref is not None:
        body["ref"] = ref
    if after:
        body["depends_on"] = list(after)
    return body | fields


async def batch(http: httpx.AsyncClient, *tasks: dict[str, Any]) -> list[dict[str, Any]]:
    response = await http.post(f"{API}/llm-tasks/batch", json={"tasks": list(tasks)})
    assert response.status_code == 201, response.text
    return list(response.json()["tasks"])


async def refused(http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await http.post(f"{API}{path}", json=body)
    assert response.status_code == 400, response.text
    return dict(response.json()["error"])


async def get(http: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    response = await http.get(f"{API}/llm-tasks/{task_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


async def statuses(http: httpx.AsyncClient, *tasks: dict[str, Any]) -> list[str]:
    return [(await get(http, t["id"]))["status"] for t in tasks]


async def run(
    http: httpx.AsyncClient, worker: str, outcome: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Claim the worker's next task and end it (a success answering `answer of <prompt>`)."""
    grant = await claim(http, worker)
    assert grant is not None, "nothing to claim"
    task_id, lease_id = grant["task"]["id"], grant["lease"]["id"]
    body = outcome or success(f"answer of {grant['task']['prompt'].splitlines()[-1]}")
    response = await http.post(
        f"{API}/llm-tasks/{task_id}/complete", json=body | {"lease_id": lease_id}
    )
    assert response.status_code == 200, response.text
    return grant


async def end_of(http: httpx.AsyncClient, grant: dict[str, Any]) -> httpx.Response:
    """A success for the grant's lease."""
    return await http.post(
        f"{API}/llm-tasks/{grant['task']['id']}/complete",
        json=success("x") | {"lease_id": grant["lease"]["id"]},
    )


async def audit_details(http: httpx.AsyncClient, task_id: str) -> list[tuple[str, str]]:
    response = await http.get(f"{API}/audit", params={"task_id": task_id, "limit": 100})
    assert response.status_code == 200, response.text
    entries = response.json()
    items = entries["items"] if isinstance(entries, dict) else entries
    return [(entry["action"], entry["detail"]) for entry in items]


async def test_a_chain_made_in_one_batch_runs_in_order_with_the_answers_passed_on(
    client: httpx.AsyncClient,
) -> None:
    await register_worker(client, "w1")
    a, b, c = await batch(
        client, task("plan", "a"), task("build", "b", "a"), task("review", "c", "b")
    )
    assert [a["status"], b["status"], c["status"]] == ["queued", "blocked", "blocked"]
    assert (b["dependencies"], b["waiting_on"], b["on_dependency_failure"]) == (1, 1, "cancel")
    assert a["has_dependents"]
    assert not c["has_dependents"]

    listed = await client.get(f"{API}/llm-tasks", params={"status": "blocked"})
    assert {t["id"] for t in listed.json()} == {b["id"], c["id"]}
    counts = (await client.get(f"{API}/stats")).json()["tasks"]["by_status"]
    assert counts == {"queued": 1, "blocked": 2}

    first = await run(client, "w1")
    assert first["task"]["id"] == a["id"]
    assert first["task"]["prompt"] == "plan"  # no dependencies: as it was given
    assert await statuses(client, b, c) == ["queued", "blocked"]

    second = await run(client, "w1")
    assert second["task"]["id"] == b["id"]
    prompt = second["task"]["prompt"]
    assert f'<dependency task="{a["id"]}" ref="a" status="completed">' in prompt
    assert "answer of plan" in prompt
    assert prompt.endswith("build")
    assert (await get(client, b["id"]))["prompt"] == "build"  # stored as given

    third = await run(client, "w1")
    assert "answer of build" in third["task"]["prompt"]
    assert "answer of plan" not in third["task"]["prompt"]  # only its own dependencies
    assert await statuses(client, a, b, c) == ["completed"] * 3
    actions = [action for action, _ in await audit_details(client, c["id"])]
    assert "task_released" in actions


async def test_fan_out_fan_in_and_a_diamond_release_each_dependent_once_its_last_completes(
    client: httpx.AsyncClient,
) -> None:
    await register_worker(client, "w1", slots=4)
    top, left, right, bottom = await batch(
        client,
        task("top", "top"),
        task("left", "left", "top"),
        task("right", "right", "top"),
        task("bottom", "bottom", "left", "right"),
    )
    await run(client, "w1")
    assert await statuses(client, left, right, bottom) == ["queued", "queued", "blocked"]
    await run(client, "w1")
    assert (await get(client, bottom["id"]))["waiting_on"] == 1
    assert (await get(client, bottom["id"]))["status"] == "blocked"
    await run(client, "w1")
    assert (await get(client, bottom["id"]))["status"] == "queued"
    grant = await run(client, "w1")
    assert grant["task"]["id"] == bottom["id"]
    prompt = grant["task"]["prompt"]
    # each dependency's block, in the order the task named them
    assert prompt.index('ref="left"') < prompt.index('ref="right"') < prompt.index("bottom")
    assert top["id"] not in prompt

    graph = (await client.get(f"{API}/llm-tasks/{top['id']}/graph")).json()
    assert graph["upstream"] == []
    assert [(n["id"], n["status"]) for n in graph["downstream"]] == [
        (left["id"], "completed"),
        (right["id"], "completed"),
    ]
    graph = (await client.get(f"{API}/llm-tasks/{bottom['id']}/graph")).json()
    assert graph["task_id"] == bottom["id"]
    assert [(n["ref"], n["status"], n["settled"]) for n in graph["upstream"]] == [
        ("left", "completed", True),
        ("right", "completed", True),
    ]
    missing = await client.get(f"{API}/llm-tasks/nope/graph")
    assert missing.status_code == 404


async def test_depending_on_existing_tasks_by_id_and_a_completed_one_queues_at_once(
    client: httpx.AsyncClient,
) -> None:
    await register_worker(client, "w1")
    first = await create_task(client, prompt="first")
    await run(client, "w1")
    second = await create_task(client, prompt="second")
    after_done = await create_task(client, prompt="after", depends_on=[first["id"]])
    assert after_done["status"] == "queued"
    assert (after_done["dependencies"], after_done["waiting_on"]) == (1, 0)
    waiting = await create_task(client, prompt="waits", depends_on=[first["id"], second["id"]])
    assert (waiting["status"], waiting["waiting_on"]) == ("blocked", 1)
    assert (await get(client, second["id"]))["has_dependents"] is True


async def test_refusals_name_the_field_and_create_nothing(client: httpx.AsyncClient) -> None:
    one = await refused(client, "/llm-tasks", task("x", None, "no-such-task"))
    assert "depends_on" in one["fieldErrors"], one
    assert "no-such-task" in one["fieldErrors"]["depends_on"][0]

    cycle = await refused(
        client,
        "/llm-tasks/batch",
        {"tasks": [task("a", "a", "c"), task("b", "b", "a"), task("c", "c", "b")]},
    )
    [(where, [message])] = cycle["fieldErrors"].items()
    assert where.startswith("tasks.")
    assert where.endswith(".depends_on")
    assert "cycle" in message

    twice = await refused(client, "/llm-tasks/batch", {"tasks": [task("a", "a"), task("b", "a")]})
    assert "tasks.1.ref" in twice["fieldErrors"]
    itself = await refused(client, "/llm-tasks/batch", {"tasks": [task("a", "a", "a")]})
    assert "depends_on" in itself["fieldErrors"]
    unknown = await refused(
        client, "/llm-tasks/batch", {"tasks": [task("a", "a"), task("b", "b", "a", "zzz")]}
    )
    assert "tasks.1.depends_on" in unknown["fieldErrors"]
    too_many = [f"t{i}" for i in range(MAX_DEPENDENCIES + 1)]
    bound = await refused(client, "/llm-tasks", task("x", None, *too_many))
    assert any("depends_on" in where for where in bound["fieldErrors"]), bound
    policy = await refused(client, "/llm-tasks", task("x", on_dependency_failure="maybe"))
    assert "on_dependency_failure" in policy["fieldErrors"]

    assert (await client.get(f"{API}/llm-tasks")).json() == []


async def test_a_failed_dependency_cancels_or_runs_its_dependents_and_a_requeue_puts_them_back(
    client: httpx.AsyncClient,
) -> None:
    await register_worker(client, "w1")
    root, child, grandchild, anyway = await batch(
        client,
        task("root", "root"),
        task("child", "child", "root"),
        task("grandchild", "grandchild", "child"),
        task("anyway", "anyway", "root", on_dependency_failure="run"),
    )
    await run(client, "w1", failure("no luck", error_code="fatal"))
    assert await statuses(client, root, child, grandchild, anyway) == [
        "failed",
        "cancelled",
        "cancelled",
        "queued",
    ]
    cancelled = await get(client, grandchild["id"])
    assert cancelled["cancelled_for"] == root["id"]
    [(_, reason)] = [
        e for e in await audit_details(client, child["id"]) if e[0] == "task_cancelled"
    ]
    assert root["id"] in reason
    assert "failed" in reason
    [(_, reason)] = [
        e for e in await audit_details(client, grandchild["id"]) if e[0] == "task_cancelled"
    ]
    assert child["id"] in reason
    assert root["id"] in reason

    told = await run(client, "w1")
    assert told["task"]["id"] == anyway["id"]
    assert f'task="{root["id"]}" ref="root" status="failed"' in told["task"]["prompt"]
    assert "no luck" in told["task"]["prompt"]

    requeued = await client.post(f"{API}/llm-tasks/{root['id']}/requeue")
    assert requeued.status_code == 200, requeued.text
    assert await statuses(client, child, grandchild) == ["blocked", "blocked"]
    assert (await get(client, child["id"]))["cancelled_for"] is None
    assert "task_reblocked" in [a for a, _ in await audit_details(client, grandchild["id"])]

    await run(client, "w1")  # root, again: a success now
    assert await statuses(client, root, child, grandchild) == ["completed", "queued", "blocked"]
    assert (await get(client, anyway["id"]))["status"] == "completed"  # ran once, not again


async def test_a_task_whose_dependency_already_failed_is_cancelled_at_create(
    client: httpx.AsyncClient,
) -> None:
    await register_worker(client, "w1")
    failed = await create_task(client, prompt="fails")
    await run(client, "w1", failure("no", error_code="fatal"))
    late = await create_task(client, prompt="late", depends_on=[failed["id"]])
    assert (late["status"], late["cancelled_for"]) == ("cancelled", failed["id"])
    runs = await create_task(
        client, prompt="runs", depends_on=[failed["id"]], on_dependency_failure="run"
    )
    assert runs["status"] == "queued"


async def test_cancel_cancels_what_waits_on_it_transitively_and_audited(
    client: httpx.AsyncClient,
) -> None:
    head, middle, tail, other = await batch(
        client,
        task("head", "head"),
        task("middle", "middle", "head"),
        task("tail", "tail", "middle"),
        task("other", "other"),
    )
    response = await client.post(f"{API}/llm-tasks/{middle['id']}/cancel")
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "cancelled"  # a blocked task is cancelled at once
    assert await statuses(client, head, middle, tail, other) == [
        "queued",
        "cancelled",
        "cancelled",
        "queued",
    ]
    [(_, reason)] = [e for e in await audit_details(client, tail["id"]) if e[0] == "task_cancelled"]
    assert middle["id"] in reason

    cancelled_head = await client.post(f"{API}/llm-tasks/{head['id']}/cancel")
    assert cancelled_head.json()["status"] == "cancelled"


async def test_a_replayed_complete_releases_nothing_twice(client: httpx.AsyncClient) -> None:
    await register_worker(client, "w1", slots=2)
    a, b, both = await batch(client, task("a", "a"), task("b", "b"), task("both", "both", "a", "b"))
    grant = await claim(client, "w1")
    assert grant is not None
    body = success("A") | {"lease_id": grant["lease"]["id"]}
    path = f"{API}/llm-tasks/{grant['task']['id']}/complete"
    first = await client.post(path, json=body)
    again = await client.post(path, json=body)
    assert first.status_code == again.status_code == 200
    assert (await get(client, both["id"]))["waiting_on"] == 1
    assert (await get(client, both["id"]))["status"] == "blocked"
    await run(client, "w1")
    assert (await get(client, both["id"]))["status"] == "queued"
    assert await statuses(client, a, b) == ["completed", "completed"]


async def test_completes_of_the_last_two_dependencies_racing_release_the_dependent_once(
    client: httpx.AsyncClient,
) -> None:
    """On PostgreSQL the two completes run on two connections at once, each in its own
    transaction: whichever commits second counts the last wait off (the row lock's recheck)."""
    await register_worker(client, "w1", slots=2)
    for round_ in range(8):
        _a, _b, c = await batch(
            client,
            task(f"a{round_}", "a"),
            task(f"b{round_}", "b"),
            task(f"c{round_}", "c", "a", "b"),
        )
        grants = [await claim(client, "w1"), await claim(client, "w1")]
        assert all(grants)
        answers = await asyncio.gather(*(end_of(client, g) for g in grants if g))
        assert [r.status_code for r in answers] == [200, 200]
        released = await get(client, c["id"])
        assert (released["status"], released["waiting_on"]) == ("queued", 0)
        actions = [action for action, _ in await audit_details(client, c["id"])]
        assert actions.count("task_released") == 1
        await run(client, "w1")


async def test_a_dependent_made_while_its_dependency_completes_is_released_either_way(
    client: httpx.AsyncClient,
) -> None:
    """A create naming an in-flight task races that task's complete (on PostgreSQL the
    one-statement complete): either the complete sees the new dependent and releases it, or
    the create sees the dependency completed and queues it. Never blocked for good."""
    await register_worker(client, "w1")
    for round_ in range(20):
        await create_task(client, prompt=f"dep{round_}")
        grant = await claim(client, "w1")
        assert grant is not None

        complete = end_of(client, grant)
        make = client.post(
            f"{API}/llm-tasks", json=task(f"after{round_}", None, grant["task"]["id"])
        )
        if round_ % 2:
            completed, made = await asyncio.gather(complete, make)
        else:
            made, completed = await asyncio.gather(make, complete)
        assert completed.status_code == 200, completed.text
        assert made.status_code == 201, made.text
        dependent = await get(client, made.json()["id"])
        assert (dependent["status"], dependent["waiting_on"]) == ("queued", 0)
        await run(client, "w1")


@pytest.mark.parametrize("count", [3])
async def test_tasks_without_dependencies_answer_as_before(
    client: httpx.AsyncClient, count: int
) -> None:
    """Seed-compatible: a plain task's answer keeps every field it had (graph fields added)."""
    made = await create_task(client)
    for name in ("id", "status", "prompt", "context_hints", "policy", "attempts"):
        assert name in made
    assert made["status"] == "queued"
    assert (made["dependencies"], made["waiting_on"], made["has_dependents"]) == (0, 0, False)
    assert made["on_dependency_failure"] is None
    tasks = await batch(client, *(task(f"p{i}") for i in range(count)))
    assert [t["status"] for t in tasks] == ["queued"] * count


async def test_the_task_page_shows_the_graph_around_a_task(client: httpx.AsyncClient) -> None:
    await register_worker(client, "w1")
    first, second = await batch(client, task("first", "first"), task("second", "second", "first"))
    page = await client.get(f"/tasks/{second['id']}")
    assert page.status_code == 200, page.text
    assert 'id="task-graph"' in page.text
    assert "Blocked: waiting on 1 of its 1 dependencies" in page.text
    assert f'href="/tasks/{first["id"]}"' in page.text
    assert '<span class="badge s-queued">queued</span>' in page.text
    await run(client, "w1")
    above = await client.get(f"/tasks/{first['id']}")
    assert 'id="graph-downstream"' in above.text
    assert f'href="/tasks/{second["id"]}"' in above.text
    assert '<span class="badge s-queued">queued</span>' in above.text  # second, released
    blocked_list = await client.get("/tasks", params={"status": "blocked"})
    assert blocked_list.status_code == 200
    plain = await client.get(f"/tasks/{(await create_task(client))['id']}")
    assert 'id="task-graph"' not in plain.text


async def test_a_graph_of_1000_tasks_is_made_in_one_call(client: httpx.AsyncClient) -> None:
    """The batch's bound: a root, 998 tasks after it in chains of ten, and a fan-in of the 998,
    all in one all-or-nothing call well under the body limit (BLOOM_MAX_BODY_BYTES, 5 MiB)."""
    middle = [f"m{i}" for i in range(998)]
    tasks = [task("root", "root")]
    for i, ref in enumerate(middle):
        tasks.append(task(ref, ref, "root", *([middle[i - 1]] if i % 10 else [])))
    tasks.append(task("sink", "sink", *middle))
    body = {"tasks": tasks}
    assert len(httpx.Request("POST", "/", json=body).content) < 1024 * 1024
    made = await batch(client, *tasks)
    assert len(made) == 1_000
    assert [t["prompt"] for t in made] == [t["prompt"] for t in tasks]  # answered in order
    assert made[0]["status"] == "queued"
    assert {t["status"] for t in made[1:]} == {"blocked"}
    assert [t["waiting_on"] for t in made[1:4]] == [1, 2, 2]
    assert (made[-1]["dependencies"], made[-1]["waiting_on"]) == (998, 998)
    counts = (await client.get(f"{API}/stats")).json()["tasks"]["by_status"]
    assert counts == {"queued": 1, "blocked": 999}
    graph = (await client.get(f"{API}/llm-tasks/{made[-1]['id']}/graph")).json()
    assert [node["ref"] for node in graph["upstream"]] == middle
    root = (await client.get(f"{API}/llm-tasks/{made[0]['id']}/graph")).json()
    assert len(root["downstream"]) == 998

    await register_worker(client, "w1")
    await run(client, "w1")  # the root: the 100 heads of the chains are released at once
    queued = await client.get(f"{API}/llm-tasks", params={"status": "queued"})
    assert {t["prompt"] for t in queued.json()} == {f"m{i}" for i in range(0, 998, 10)}

    too_many = await client.post(
        f"{API}/llm-tasks/batch", json={"tasks": [task(f"x{i}") for i in range(1_001)]}
    )
    assert too_many.status_code == 400


async def test_a_batch_takes_up_to_50000_dependencies_in_all(client: httpx.AsyncClient) -> None:
    """500 tasks and 100 fan-ins of all 500: 50,000 edges in one call (on PostgreSQL more
    arguments than one statement takes: they go in by executemany); one more is refused."""
    roots = [task(f"r{i}", f"r{i}") for i in range(500)]
    refs = [root["ref"] for root in roots]
    fan_ins = [task(f"f{i}", f"f{i}", *refs) for i in range(100)]
    assert sum(len(t["depends_on"]) for t in fan_ins) == MAX_BATCH_DEPENDENCIES
    made = await batch(client, *roots, *fan_ins)
    assert {(t["waiting_on"], t["status"]) for t in made[500:]} == {(500, "blocked")}
    graph = (await client.get(f"{API}/llm-tasks/{made[0]['id']}/graph")).json()
    assert len(graph["downstream"]) == 100
    one_more = [*roots, *fan_ins, task("x", "x", "r0")]
    for item in one_more:
        item["context_id"] += "-again"
    refusal = await refused(client, "/llm-tasks/batch", {"tasks": one_more})
    assert "50001 dependencies" in refusal["fieldErrors"]["tasks"][0]
    stats = (await client.get(f"{API}/stats")).json()["tasks"]["by_status"]
    assert stats == {"queued": 500, "blocked": 100}


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_a_release_is_one_statement_whatever_the_dependents(
    client: httpx.AsyncClient, sent: Sent
) -> None:
    """The complete of a dependency sends as many statements for 40 dependents as for one (their
    audit entries ride along), one of them the release: edges settled and waits counted off."""
    await register_worker(client, "w1", slots=4)
    sent_for: dict[int, list[str]] = {}
    for dependents in (1, 40):
        made = await batch(
            client,
            task(f"first of {dependents}", "a"),
            task(f"second of {dependents}", "b"),
            *(task(f"d{n} of {dependents}", f"d{n}", "a", "b") for n in range(dependents)),
        )
        first, second = await claim(client, "w1"), await claim(client, "w1")
        assert first is not None
        assert second is not None
        assert (await end_of(client, first)).status_code == 200  # one wait off each
        sent.clear()
        assert (await end_of(client, second)).status_code == 200  # the last: all released
        sent_for[dependents] = list(sent.statements)
        assert set(await statuses(client, *made[2:])) == {"queued"}
        for _ in range(dependents):  # out of the next round's way
            await run(client, "w1")
    assert len(sent_for[40]) == len(sent_for[1]), sent_for[40]
    releases = [sql for sql in sent_for[40] if "UPDATE task_dependencies" in sql]
    assert len(releases) == 1, sent_for[40]
    assert "UPDATE llm_tasks" in releases[0]
