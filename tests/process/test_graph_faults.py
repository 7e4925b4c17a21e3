"""Task graphs, exactly once under faults, with real runtime processes (docs/graphs.md, "Exactly
once: the argument"):

- two replicas on one PostgreSQL, the completes of fan-ins' last two dependencies sent at once,
  one to each replica: each dependent released once, granted once, run once; every complete
  replayed on the other replica releases nothing more;
- kill -9 of the runtime between a last dependency's complete and the dependent's claim (one
  dependent idle, one just granted to a claim whose worker never starts it): after the restart
  the first is queued, the second's lease expires unstarted, and a real worker runs each once,
  with its dependencies' answers; the complete sent again after the restart (a replay) releases
  nothing twice. Both databases.
"""

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from bloom.runtime.storage.tables import audit_logs, llm_results
from tests.support.api import API, success
from tests.support.db import DatabaseProbe
from tests.support.server import RuntimeProcess
from tests.support.stack import Stack, wait_for

FAN_INS = 4  # per round: 8 dependencies, 8 completes racing
ROUNDS = 6


def item(prompt: str, ref: str, *after: str) -> dict[str, Any]:
    body = {"context_id": f"ctx-{prompt}", "agent_slug": "default", "prompt": prompt, "ref": ref}
    return body | ({"depends_on": list(after)} if after else {})


def post(url: str, path: str, body: dict[str, Any], timeout: float = 30) -> httpx.Response:
    return httpx.post(f"{url}{API}{path}", json=body, timeout=timeout)


def register(url: str, name: str, slots: int) -> None:
    body = {"name": name, "capabilities": {"claude_cli": True, "max_concurrency": slots}}
    response = post(url, "/workers", body)
    assert response.status_code in (200, 201), response.text


def claim(url: str, worker: str, wait: float = 0) -> dict[str, Any] | None:
    response = post(url, f"/workers/{worker}/claim", {"wait_seconds": wait}, timeout=wait + 30)
    if response.status_code == 204:
        return None
    assert response.status_code == 200, response.text
    return dict(response.json())


def claim_all(url: str, worker: str) -> list[dict[str, Any]]:
    """Claims until there is nothing to claim: every grant."""
    grants = []
    while (grant := claim(url, worker)) is not None:
        grants.append(grant)
    return grants


def complete(url: str, grant: dict[str, Any], output: str) -> httpx.Response:
    body = success(output) | {"lease_id": grant["lease"]["id"]}
    return post(url, f"/llm-tasks/{grant['task']['id']}/complete", body)


@contextmanager
def kept_alive(url: str, grants: list[dict[str, Any]]) -> Iterator[None]:
    """Heartbeats the grants every half second (their worker acknowledges them and keeps them
    past the stack's short lease), until the block ends; a grant already completed answers 409,
    which is fine."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.is_set():
            for grant in grants:
                body = {"lease_id": grant["lease"]["id"]}
                post(url, f"/llm-tasks/{grant['task']['id']}/heartbeat", body)
            stop.wait(0.5)

    keeper = threading.Thread(target=beat)
    keeper.start()
    try:
        yield
    finally:
        stop.set()
        keeper.join(30)


def at_once(*calls: Callable[[], Any]) -> list[Any]:
    """Each call on a thread of its own, all let go together; their answers, in order."""
    gate = threading.Barrier(len(calls))
    answers: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        gate.wait()
        answers[index] = calls[index]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return answers


def ends(grants: list[dict[str, Any]], a_to: str, b_to: str) -> list[Callable[[], httpx.Response]]:
    """A complete of each grant: a fan-in's `-a` dependency's sent to `a_to`, `-b`'s to `b_to`."""
    return [
        partial(complete, a_to if g["task"]["prompt"].endswith("-a") else b_to, g, "x")
        for g in grants
    ]


def actions(probe: DatabaseProbe, task_id: str, action: str) -> int:
    return probe.count(audit_logs, audit_logs.c.task_id == task_id, audit_logs.c.action == action)


@pytest.fixture
def replicas(database_url: str, tmp_path: Path) -> Iterator[list[RuntimeProcess]]:
    started = [RuntimeProcess(database_url, tmp_path / f"r{n}") for n in range(2)]
    for replica in started:
        replica.start()
    yield started
    for replica in started:
        replica.stop()


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_completes_racing_on_two_replicas_release_and_run_each_dependent_once(
    replicas: list[RuntimeProcess], probe: DatabaseProbe
) -> None:
    one, other = (replica.url for replica in replicas)
    register(one, "deps", FAN_INS * 2)
    register(one, "x0", FAN_INS)
    register(one, "x1", FAN_INS)
    for round_ in range(ROUNDS):
        tasks: list[dict[str, Any]] = []
        for n in range(FAN_INS):
            name = f"r{round_}f{n}"
            tasks += [
                item(f"{name}-a", f"{name}-a"),
                item(f"{name}-b", f"{name}-b"),
                item(f"{name}-c", f"{name}-c", f"{name}-a", f"{name}-b"),
            ]
        made = post(one, "/llm-tasks/batch", {"tasks": tasks})
        assert made.status_code == 201, made.text
        by_prompt = {task["prompt"]: task["id"] for task in made.json()["tasks"]}
        dependents = [by_prompt[f"r{round_}f{n}-c"] for n in range(FAN_INS)]

        grants = claim_all(one, "deps")
        assert len(grants) == FAN_INS * 2
        # each fan-in's a to one replica, its b to the other, all 8 completes let go at once
        calls = ends(grants, one, other)
        answers = at_once(*calls)
        assert [response.status_code for response in answers] == [200] * len(calls)
        for task_id in dependents:
            row = probe.task(task_id)
            assert (row["status"], row["waiting_on"]) == ("queued", 0), row
            assert actions(probe, task_id, "task_released") == 1

        # every complete replayed on the other replica: answered from the first, nothing moves
        replays = at_once(*ends(grants, other, one))
        assert [response.status_code for response in replays] == [200] * len(calls)

        # two workers claim on the two replicas at once: every dependent granted exactly once
        got = at_once(lambda: claim_all(one, "x0"), lambda: claim_all(other, "x1"))
        granted = [grant for grants_of in got for grant in grants_of]
        assert sorted(grant["task"]["id"] for grant in granted) == sorted(dependents)
        for grant in granted:
            prompt = grant["task"]["prompt"]
            assert prompt.count("<dependency ") == 2
            assert complete(one, grant, "done").status_code == 200
        for task_id in dependents:
            assert actions(probe, task_id, "task_released") == 1
            assert len(probe.leases_of(task_id)) == 1
            assert probe.count(llm_results, llm_results.c.task_id == task_id) == 1
            assert probe.task(task_id)["status"] == "completed"


@pytest.fixture
def crash_stack(database_url: str, tmp_path: Path, claude: Path) -> Iterator[Stack]:
    built = Stack(
        database_url,
        tmp_path,
        claude,
        BLOOM_LEASE_TTL_SEC="5",
        BLOOM_CLAIM_ACK_SEC="2",
    )
    try:
        built.start()
        yield built
    finally:
        built.close()


def test_kill_9_between_the_last_complete_and_the_claim_loses_nothing_and_runs_once(
    crash_stack: Stack, probe: DatabaseProbe
) -> None:
    stack = crash_stack
    url = stack.runtime.url
    made = post(
        url,
        "/llm-tasks/batch",
        {
            "tasks": [
                item("the colour is teal", "a1"),
                item("the shape is a star", "b1"),
                item("name the colour and shape", "c1", "a1", "b1"),
                item("the fruit is a plum", "a2"),
                item("the tree is an oak", "b2"),
                item("name the fruit and tree", "c2", "a2", "b2"),
            ]
        },
    )
    assert made.status_code == 201, made.text
    a1, b1, c1, a2, b2, c2 = (task["id"] for task in made.json()["tasks"])
    register(url, "http-worker", 4)
    register(url, "never-starts", 1)
    grants = {grant["task"]["id"]: grant for grant in claim_all(url, "http-worker")}
    assert set(grants) == {a1, b1, a2, b2}
    # the stack's leases are short (2 s to acknowledge, 5 s to live): http-worker keeps its own
    # alive, however slow the machine, so that only never-starts' lease can lapse
    with kept_alive(url, list(grants.values())):
        assert complete(url, grants[b1], "b1's answer: star").status_code == 200
        assert complete(url, grants[b2], "b2's answer: oak").status_code == 200

        # c2's last dependency completes while a claim waits: the claim is granted c2 and its
        # worker never starts it (it will not acknowledge the lease)
        waiting: list[dict[str, Any] | None] = []
        poll = threading.Thread(target=lambda: waiting.append(claim(url, "never-starts", 20)))
        poll.start()
        time.sleep(0.5)  # the long poll is waiting
        assert complete(url, grants[a2], "a2's answer: plum").status_code == 200
        poll.join(30)
        assert waiting[0] is not None
        assert waiting[0]["task"]["id"] == c2

    # c1's last dependency completes, and the runtime dies before anyone claims c1
    first = complete(url, grants[a1], "a1's answer: teal")
    assert first.status_code == 200
    stack.runtime.kill(signal.SIGKILL)
    row = probe.task(c1)
    assert (row["status"], row["waiting_on"]) == ("queued", 0)  # committed with a1's end
    assert actions(probe, c1, "task_released") == 1

    stack.runtime.start()
    again = complete(url, grants[a1], "a1's answer: teal")  # the worker never heard: a replay
    assert again.status_code == 200, again.text
    assert again.json()["task"]["status"] == first.json()["task"]["status"] == "completed"
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert stack.task(c1)["status"] == "queued"
    assert actions(probe, c1, "task_released") == 1

    wait_for(lambda: stack.task(c2)["status"] == "queued", 30, "c2's unstarted lease expired")
    stack.add_worker("w1")
    for task_id, words in ((c1, ("teal", "star")), (c2, ("plum", "oak"))):
        done = stack.wait(task_id, timeout=120)
        assert done["status"] == "completed", stack.logs()[-3000:]
        answer = stack.output(task_id)
        for word in words:
            assert word in answer
        assert actions(probe, task_id, "task_released") == 1
        assert actions(probe, task_id, "task_running") == 1  # started once
        assert probe.count(llm_results, llm_results.c.task_id == task_id) == 1
    for task_id in (a1, b1, a2, b2):
        assert probe.count(llm_results, llm_results.c.task_id == task_id) == 1
    leases = {lease["worker_id"]: lease["status"] for lease in probe.leases_of(c2)}
    assert leases == {"never-starts": "expired", "w1": "released"}, probe.leases_of(c2)
