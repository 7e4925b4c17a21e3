"""Tool policies (issue 33, step 1) on both databases: a task's `policy.tools` checked (a bad
rule is a 400 naming it), merged at create with its project's defaults (deny wins), bypass only
where allowed, `ask` rules merged; the routes, their audit, and the worker's
view of the stored policy."""

from typing import Any

import httpx

from bloom.clients.wire import TaskInfo
from tests.support.api import API, create_task


async def post_task(client: httpx.AsyncClient, tools: dict[str, Any], **fields: Any) -> Any:
    body = {"context_id": "c", "agent_slug": "alpha", "prompt": "p", "policy": {"tools": tools}}
    return await client.post(f"{API}/llm-tasks", json=body | fields)


async def put_policy(client: httpx.AsyncClient, project: str, **rules: Any) -> dict[str, Any]:
    response = await client.put(f"{API}/tool-policies/{project}", json=rules)
    assert response.status_code == 200, response.text
    return dict(response.json())


def policy_errors(response: httpx.Response) -> list[str]:
    assert response.status_code == 400, response.text
    body = response.json()["error"]
    assert body["formErrors"] == []
    return list(body["fieldErrors"]["policy"])


async def test_a_tasks_tools_are_kept_and_read_by_the_worker(client: httpx.AsyncClient) -> None:
    tools = {"allow": ["Bash(git status)", "Read"], "deny": ["WebFetch"], "max_turns": 4}
    response = await post_task(client, tools)
    assert response.status_code == 201, response.text
    kept = response.json()["policy"]["tools"]
    assert kept == {
        "allow": ["Bash(git status)", "Read"],
        "deny": ["WebFetch"],
        "ask": [],
        "max_turns": 4,
    }
    read = await client.get(f"{API}/llm-tasks/{response.json()['id']}")
    policy = TaskInfo.from_json(read.json()).policy
    assert policy.tools is not None
    assert (policy.tools.allow, policy.tools.deny, policy.tools.max_turns) == (
        ("Bash(git status)", "Read"),
        ("WebFetch",),
        4,
    )


async def test_a_task_without_tools_keeps_none(client: httpx.AsyncClient) -> None:
    task = await create_task(client)
    assert "tools" not in task["policy"]
    assert TaskInfo.from_json(task).policy.tools is None


async def test_a_bad_rule_is_a_400_naming_the_field_and_the_rule(
    client: httpx.AsyncClient,
) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"allow": ["Bash(git push"]}, "Bash(git push"),
        ({"deny": ["Web Fetch"]}, "Web Fetch"),
        ({"allow": ["Bash(a))"]}, "unbalanced"),
        ({"deny": ["Bash(ls\u0007)"]}, "control character"),
        ({"mode": "yolo"}, "mode"),
        ({"max_turns": 0}, "max_turns"),
        ({"allow": "Bash"}, "allow"),
        ({"allow": ["Bash"] * 101}, "allow"),
        ({"unknown": 1}, "Unrecognized key"),
        ({"on_timeout": "maybe"}, "on_timeout"),
    ]
    for tools, named in cases:
        errors = policy_errors(await post_task(client, tools))
        assert any(named in error for error in errors), (tools, errors)
    said = policy_errors(await post_task(client, {"deny": ["Edit", "Web Fetch"]}))
    assert said[0].startswith("tools.deny: rule 'Web Fetch'")
    # the batch checks each task the same way, and creates none
    batch: list[dict[str, Any]] = [{"context_id": "c", "agent_slug": "a", "prompt": "p"}] * 2
    batch[1] = batch[1] | {"policy": {"tools": {"allow": ["(x)"]}}}
    response = await client.post(f"{API}/llm-tasks/batch", json={"tasks": batch})
    assert response.status_code == 400
    assert "(x)" in str(response.json()["error"]["fieldErrors"])
    assert (await client.get(f"{API}/llm-tasks")).json() == []


async def test_ask_rules_are_taken_from_the_task_and_the_project(
    client: httpx.AsyncClient,
) -> None:
    await put_policy(client, "alpha", ask=["WebFetch"])
    response = await post_task(client, {"ask": ["Bash(git push:*)"], "on_timeout": "fail"})
    assert response.status_code == 201, response.text
    tools = response.json()["policy"]["tools"]
    assert (tools["ask"], tools["on_timeout"]) == (["WebFetch", "Bash(git push:*)"], "fail")


async def test_project_defaults_merge_and_the_projects_deny_wins(
    client: httpx.AsyncClient,
) -> None:
    await put_policy(client, "alpha", allow=["Read"], deny=["Bash"], mode="plan", max_turns=9)
    response = await post_task(
        client, {"allow": ["Bash(git push:*)", "Edit"], "deny": ["WebFetch"], "max_turns": 2}
    )
    assert response.status_code == 201, response.text
    assert response.json()["policy"]["tools"] == {
        "allow": ["Read", "Edit"],
        "deny": ["Bash", "WebFetch"],
        "ask": [],
        "mode": "plan",
        "max_turns": 2,
    }
    # a task of the project that says nothing about tools gets the defaults
    plain = await create_task(client, agent_slug="alpha")
    assert plain["policy"]["tools"]["deny"] == ["Bash"]
    # another project's tasks do not
    other = await create_task(client, agent_slug="beta")
    assert "tools" not in other["policy"]


async def test_bypass_only_where_an_admin_allowed_it(client: httpx.AsyncClient) -> None:
    errors = policy_errors(await post_task(client, {"mode": "bypassPermissions"}))
    assert "bypassPermissions is not allowed for 'this project'" in errors[0]
    await put_policy(client, "alpha", deny=["WebFetch"])
    errors = policy_errors(await post_task(client, {"mode": "bypassPermissions"}))
    assert "'alpha'" in errors[0]
    refused = await client.put(f"{API}/tool-policies/alpha", json={"mode": "bypassPermissions"})
    assert "allow_bypass" in policy_errors(refused)[0]
    await put_policy(client, "alpha", deny=["WebFetch"], allow_bypass=True)
    response = await post_task(client, {"mode": "bypassPermissions"})
    assert response.status_code == 201, response.text
    assert response.json()["policy"]["tools"]["mode"] == "bypassPermissions"
    assert response.json()["policy"]["tools"]["deny"] == ["WebFetch"]


async def test_the_routes_set_read_list_and_remove_audited(client: httpx.AsyncClient) -> None:
    assert (await client.get(f"{API}/tool-policies")).json() == []
    assert (await client.get(f"{API}/tool-policies/alpha")).status_code == 404
    assert (await client.delete(f"{API}/tool-policies/alpha")).status_code == 404
    made = await put_policy(client, "alpha", allow=["Read"], deny=["Bash(rm:*)"], max_turns=3)
    assert made["project"] == "alpha"
    assert made["allow"] == ["Read"]
    assert made["deny"] == ["Bash(rm:*)"]
    assert made["max_turns"] == 3
    assert made["allow_bypass"] is False
    assert made["mode"] is None
    assert made["updated_by"]
    await put_policy(client, "beta", deny=["WebFetch"])
    replaced = await put_policy(client, "alpha", deny=["Bash"])
    assert replaced["allow"] == []
    assert replaced["max_turns"] is None
    assert (await client.get(f"{API}/tool-policies/alpha")).json() == replaced
    listed = (await client.get(f"{API}/tool-policies")).json()
    assert [policy["project"] for policy in listed] == ["alpha", "beta"]
    bad = await client.put(f"{API}/tool-policies/alpha", json={"deny": ["Bash("]})
    assert "Bash(" in str(bad.json()["error"]["fieldErrors"]["deny"])
    removed = await client.delete(f"{API}/tool-policies/alpha")
    assert removed.json() == {"removed": True, "project": "alpha"}
    assert (await client.get(f"{API}/tool-policies/alpha")).status_code == 404
    entries = (await client.get(f"{API}/audit", params={"limit": 100})).json()
    trail = [(e["action"], e["entity_id"]) for e in entries if e["entity_type"] == "tool_policy"][
        ::-1
    ]
    assert trail == [
        ("tool_policy_set", "alpha"),
        ("tool_policy_set", "beta"),
        ("tool_policy_set", "alpha"),
        ("tool_policy_removed", "alpha"),
    ]
    details = [e["detail"] for e in entries if e["action"] == "tool_policy_set"]
    assert "deny [Bash]" in details[0]
