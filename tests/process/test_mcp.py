"""`bloom mcp` as a Claude session meets it: the SDK's own client launches it over stdio against a
real keyed runtime and a worker running the Claude CLI (echo model). Tools listed, a task
submitted, waited for with its live output as progress, its answer read as a tool result and as
a resource, a task cancelled, refusals as tool errors, a viewer key offered the read tools only."""

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult, ResourceLink, TextContent

from tests.support.databases import fresh_sqlite_url
from tests.support.stack import Stack

ADMIN_KEY = "mcp-admin-key-0123456789abcdef"
BLOOM = [sys.executable, "-m", "bloom.cli.main"]


@pytest.fixture(scope="module")
def keyed(
    sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory, claude: Path
) -> Iterator[Stack]:
    """One keyed stack (SQLite) with one worker, shared by this module's tests."""
    data_dir = tmp_path_factory.mktemp("mcp")
    built = Stack(fresh_sqlite_url(sqlite_template, data_dir), data_dir, claude, ADMIN_KEY)
    try:
        built.start()
        built.add_worker("w1")
        yield built
    finally:
        built.close()


def bloom_mcp(url: str, key: str) -> Client:
    env = {k: v for k, v in os.environ.items() if not k.endswith("API_KEY")}
    env |= {"BLOOM_RUNTIME_URL": url, "BLOOM_API_KEY": key}
    return Client(StdioServerParameters(command=BLOOM[0], args=[*BLOOM[1:], "mcp"], env=env))


def structured(result: CallToolResult) -> Any:
    assert not result.is_error, result.content
    content = result.structured_content
    assert content is not None
    return content.get("result", content)  # a list comes wrapped as {"result": [...]}


def error_text(result: CallToolResult) -> str:
    assert result.is_error
    return " ".join(c.text for c in result.content if isinstance(c, TextContent))


async def test_a_session_queues_a_graph_and_a_task_after_another(keyed: Stack) -> None:
    """submit_graph makes a whole graph in one call (refs, depends_on); submit_task takes
    depends_on (ids); the tasks waiting are blocked; a refusal names what is wrong."""
    async with bloom_mcp(keyed.runtime.url, ADMIN_KEY) as client:
        made = structured(
            await client.call_tool(
                "submit_graph",
                {
                    "tasks": [
                        {"prompt": "plan [[sleep 30]]", "ref": "plan"},
                        {
                            "prompt": "build",
                            "ref": "build",
                            "depends_on": ["plan"],
                            "dependency_artifacts": ["plan"],
                        },
                        {"prompt": "check", "depends_on": ["plan"], "on_dependency_failure": "run"},
                    ]
                },
            )
        )
        tasks = made["result"] if isinstance(made, dict) else made
        assert [t["status"] for t in tasks] == ["queued", "blocked", "blocked"]
        assert tasks[1]["waiting_on"] == 1
        after = structured(
            await client.call_tool(
                "submit_task",
                {
                    "prompt": "after both",
                    "depends_on": [tasks[1]["id"], tasks[2]["id"]],
                    "dependency_artifacts": [tasks[2]["id"]],
                },
            )
        )
        assert (after["status"], after["dependencies"], after["waiting_on"]) == ("blocked", 2, 2)
        graph = keyed.http.get(f"/llm-tasks/{after['id']}/graph").json()
        assert [node["with_artifacts"] for node in graph["upstream"]] == [False, True]
        graph = keyed.http.get(f"/llm-tasks/{tasks[1]['id']}/graph").json()
        assert [node["with_artifacts"] for node in graph["upstream"]] == [True]
        outside = await client.call_tool(
            "submit_task",
            {"prompt": "x", "depends_on": [tasks[1]["id"]], "dependency_artifacts": ["nope"]},
        )
        assert "is not named in depends_on" in error_text(outside)
        cycle = await client.call_tool(
            "submit_graph",
            {
                "tasks": [
                    {"prompt": "a", "ref": "a", "depends_on": ["b"]},
                    {"prompt": "b", "ref": "b", "depends_on": ["a"]},
                ]
            },
        )
        assert "cycle" in error_text(cycle)
        for task in [*tasks, after]:
            await client.call_tool("cancel_task", {"task_id": task["id"]})


async def test_a_session_queues_waits_reads_and_cancels(keyed: Stack) -> None:
    async with bloom_mcp(keyed.runtime.url, ADMIN_KEY) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == {
            "submit_task",
            "submit_graph",
            "get_task",
            "list_tasks",
            "wait_task",
            "cancel_task",
            "get_artifact",
            "list_workers",
            "fleet_status",
            "list_approvals",
            "decide_approval",
        }
        assert tools["submit_task"].description
        assert "prompt" in tools["submit_task"].input_schema["required"]
        assert tools["get_task"].annotations is not None
        assert tools["get_task"].annotations.read_only_hint is True

        submitted = structured(
            await client.call_tool("submit_task", {"prompt": "hello from mcp", "agent_slug": "p1"})
        )
        assert submitted["status"] == "queued"
        assert submitted["agent_slug"] == "p1"

        lines: list[str] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            lines.append(message or "")

        done = structured(
            await client.call_tool(
                "wait_task",
                {"task_id": submitted["id"], "timeout_sec": 60},
                progress_callback=on_progress,
            )
        )
        assert done["done"] is True
        assert done["status"] == "completed"
        assert done["output"] == "echo: hello from mcp"
        assert any(line.startswith("started on w1") for line in lines), lines
        assert any("echo: hello from mcp" in line for line in lines), lines

        artifact = await client.call_tool("get_artifact", {"task_id": submitted["id"]})
        assert not artifact.is_error
        assert [c.text for c in artifact.content if isinstance(c, TextContent)] == [
            "echo: hello from mcp"
        ]
        read = await client.read_resource(f"bloom://artifacts/{done['artifact_id']}")
        assert [getattr(c, "text", None) for c in read.contents] == ["echo: hello from mcp"]
        result = await client.read_resource(f"bloom://tasks/{submitted['id']}/result")
        assert [getattr(c, "text", None) for c in result.contents] == ["echo: hello from mcp"]

        listed = structured(await client.call_tool("list_tasks", {"status": "completed"}))
        assert submitted["id"] in [t["id"] for t in listed]
        workers = structured(await client.call_tool("list_workers", {}))
        assert [(w["id"], w["status"], w["max_concurrency"]) for w in workers] == [
            ("w1", "online", 1)
        ]
        status = structured(await client.call_tool("fleet_status", {}))
        assert (status["workers_online"], status["workers_total"]) == (1, 1)
        assert status["free_slots"] + status["in_flight"] == 1
        assert status["cost_today_usd"] > 0  # the echo model's runs, as the CLI priced them
        assert status["cost_today_by_project"]["p1"] > 0

        long = structured(await client.call_tool("submit_task", {"prompt": "wait [[sleep 30]]"}))
        cancelled = structured(await client.call_tool("cancel_task", {"task_id": long["id"]}))
        assert cancelled["id"] == long["id"]
        ended = structured(
            await client.call_tool("wait_task", {"task_id": long["id"], "timeout_sec": 30})
        )
        assert ended["status"] == "cancelled"

        missing = await client.call_tool("get_task", {"task_id": "no-such-task"})
        assert "404" in error_text(missing)
        refused = await client.call_tool("cancel_task", {"task_id": submitted["id"]})
        assert "409" in error_text(refused)  # an ended task, in the runtime's words
        bad = await client.call_tool("submit_task", {"prompt": ""})
        assert bad.is_error
        # the server is still there after every refusal
        assert structured(await client.call_tool("get_task", {"task_id": submitted["id"]}))


async def test_a_large_answer_comes_as_a_resource_link(keyed: Stack) -> None:
    task_id = keyed.submit("x" * 25_000)
    assert keyed.wait(task_id)["status"] == "completed"
    async with bloom_mcp(keyed.runtime.url, ADMIN_KEY) as client:
        got = await client.call_tool("get_artifact", {"task_id": task_id})
        assert not got.is_error
        (link,) = got.content
        assert isinstance(link, ResourceLink)
        read = await client.read_resource(str(link.uri))
        assert getattr(read.contents[0], "text", "") == "echo: " + "x" * 25_000
        view = structured(await client.call_tool("get_task", {"task_id": task_id}))
        assert view["output_uri"] == str(link.uri)
        assert view["output_bytes"] == len("echo: ") + 25_000
        assert "output" not in view


async def test_a_viewer_key_gets_the_read_tools_only(keyed: Stack) -> None:
    task_id = keyed.submit("seen by a viewer")
    keyed.wait(task_id)
    async with bloom_mcp(keyed.runtime.url, keyed.make_key("viewer")) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert "submit_task" not in names
        assert "cancel_task" not in names
        assert "decide_approval" not in names
        assert {"get_task", "wait_task", "get_artifact", "fleet_status", "list_approvals"} <= names
        view = structured(await client.call_tool("get_task", {"task_id": task_id}))
        assert view["output"] == "echo: seen by a viewer"
        assert "may only read" in (client.instructions or "")


async def test_an_unreachable_runtime_is_a_tool_error_not_a_crash(keyed: Stack) -> None:
    async with bloom_mcp("http://127.0.0.1:9", ADMIN_KEY) as client:
        failed = await client.call_tool("fleet_status", {})
        assert "cannot reach the runtime at http://127.0.0.1:9" in error_text(failed)
        again = await client.call_tool("list_workers", {})
        assert again.is_error
    async with bloom_mcp(keyed.runtime.url, "wrong-key") as client:
        denied = await client.call_tool("list_tasks", {})
        assert "401" in error_text(denied)
        assert ADMIN_KEY not in error_text(denied)


def test_a_real_claude_session_queues_work_on_the_fleet(
    keyed: Stack, claude: Path, tmp_path: Path
) -> None:
    """The real `claude -p` with `--mcp-config` naming `bloom mcp`: its (scripted) model asks
    for submit_task and then wait_task on the task it got; the task runs on the fleet's worker,
    and its answer comes back into the session's own answer."""
    config = {
        "mcpServers": {
            "bloom": {
                "command": BLOOM[0],
                "args": [*BLOOM[1:], "mcp"],
                "env": {"BLOOM_RUNTIME_URL": keyed.runtime.url, "BLOOM_API_KEY": ADMIN_KEY},
            }
        }
    }
    prompt = (
        'queue it [[tool mcp__bloom__submit_task {"prompt": "from a claude session"}]] '
        '[[tool mcp__bloom__wait_task {"task_id": "$id"}]]'
    )
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.endswith("API_KEY")}
    env |= {
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": keyed.model.url,
        "ANTHROPIC_API_KEY": "test-model-key",
    }
    done = subprocess.run(
        [
            str(claude),
            "--bare",
            "-p",
            "--output-format",
            "json",
            "--mcp-config",
            json.dumps(config),
            "--strict-mcp-config",
            "--allowedTools",
            "mcp__bloom__submit_task,mcp__bloom__wait_task",
        ],
        input=prompt,
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    answer = json.loads(done.stdout)
    assert answer["is_error"] is False, answer
    queued = [
        t for t in keyed.http.get("/llm-tasks").json() if t["prompt"] == "from a claude session"
    ]
    assert len(queued) == 1
    assert queued[0]["status"] == "completed"
    assert queued[0]["worker_id"] == "w1"
    result = answer["result"]
    assert queued[0]["id"] in result
    assert "echo: from a claude session" in result  # the fleet's answer, in the session's


def test_bloom_mcp_install_adds_a_server_the_real_claude_connects_to(
    keyed: Stack, claude: Path, tmp_path: Path
) -> None:
    """From any directory, with no `bloom` on PATH: the command Claude keeps is absolute."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BLOOM_", "RUNTIME_"))}
    env |= {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "BLOOM_CLAUDE_BIN": str(claude)}
    keyed_env = env | {"BLOOM_API_KEY": ADMIN_KEY}

    def run(argv: list[str], with_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, env=with_env, cwd=tmp_path, capture_output=True, text=True, timeout=120
        )

    url = keyed.runtime.url
    added = run([*BLOOM, "mcp", "install", "--scope", "user", "--url", url], keyed_env)
    assert added.returncode == 0, added.stderr
    assert f"-e BLOOM_RUNTIME_URL={url} -e 'BLOOM_API_KEY=***' -- {sys.executable}" in added.stderr
    assert ADMIN_KEY not in added.stdout + added.stderr
    server = json.loads((tmp_path / ".claude.json").read_text())["mcpServers"]["bloom"]
    assert [server["command"], *server["args"]] == [*BLOOM, "mcp"]
    assert server["env"] == {"BLOOM_RUNTIME_URL": url, "BLOOM_API_KEY": ADMIN_KEY}

    listed = run([str(claude), "mcp", "list"], env)
    assert listed.returncode == 0, listed.stderr
    assert f"bloom: {sys.executable} -m bloom.cli.main mcp - ✔ Connected" in listed.stdout

    shared = run([*BLOOM, "mcp", "install", "--scope", "project", "--url", url], keyed_env)
    assert shared.returncode == 0, shared.stderr
    project = json.loads((tmp_path / ".mcp.json").read_text())["mcpServers"]["bloom"]
    assert project["env"]["BLOOM_API_KEY"] == "${BLOOM_API_KEY}"  # the shared file has no key
