"""Approvals end to end (issue 33) with real processes: the runtime, the echo model scripting the
tool calls, and `bloom worker run` running the pinned Claude CLI. A `Bash` call in the task's
`ask` rules stops the run (the CLI defers it through the worker's hook) and the task waits
without its worker; another task runs on the one slot meanwhile; approved (with `bloom
approvals`), the session resumes and runs exactly that call, its output in the answer; denied,
the agent is told the note; a worker killed with -9 while the task waits loses nothing."""

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.support.stack import Stack, wait_for

# The worker's side, on one database: the approvals' storage is the same code on both, tested on
# both by tests/integration/test_approvals_api.py.
pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

ASK = {"tools": {"ask": ["Bash(touch:*)"]}}
BLOOM = [sys.executable, "-m", "bloom.cli.main"]


def shell(command: str) -> str:
    return f'[[tool Bash {{"command": "{command}"}}]]'


def bloom(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("API_KEY")}
    env["BLOOM_RUNTIME_URL"] = stack.runtime.url
    return subprocess.run(
        [*BLOOM, *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def pending(stack: Stack, task_id: str) -> dict[str, Any]:
    """The task's approval once its run stopped at the call."""
    stack.wait(task_id, {"awaiting_approval"}, timeout=90)
    listed = bloom(stack, "approvals", "list", "--task", task_id, "--json")
    assert listed.returncode == 0, listed.stderr
    (approval,) = json.loads(listed.stdout)
    return dict(approval)


def made(stack: Stack, name: str) -> list[Path]:
    return list(stack.data_dir.rglob(name))


def test_a_call_waits_for_a_person_with_its_slot_free_then_runs_once_approved(
    stack: Stack,
) -> None:
    stack.add_worker("w1")  # one slot
    asked = stack.submit("ask-1 " + shell("touch approved.txt && echo made it"), policy=ASK)
    approval = pending(stack, asked)
    assert approval["tool_name"] == "Bash"
    assert approval["tool_input"] == {"command": "touch approved.txt && echo made it"}
    assert approval["status"] == "pending"
    assert approval["reason"] == "Bash(touch:*) is in the task's ask rules"
    assert made(stack, "approved.txt") == []  # it never ran unasked
    task = stack.task(asked)
    assert task["worker_id"] is None
    assert task["lease_id"] is None

    # the worker's slot is free: another task runs to the end meanwhile
    other = stack.submit("meanwhile")
    assert stack.wait(other, timeout=60)["status"] == "completed"

    approved = bloom(stack, "approvals", "approve", approval["id"], "--note", "fine")
    assert approved.returncode == 0, approved.stderr
    assert "approved" in approved.stdout
    done = stack.wait(asked, timeout=90)
    assert done["status"] == "completed", stack.logs()[-4000:]
    assert stack.output(asked) == "echo: made it"  # the command's output, in the answer
    assert len(made(stack, "approved.txt")) == 1
    assert done["session_id"] == approval["session_id"]  # the same session, resumed
    # every tool call in the record: asked in the first run, approved in the second
    shown = bloom(stack, "task", "show", asked, "--tools", "--json")
    assert shown.returncode == 0, shown.stderr
    details = [entry["detail"] for entry in json.loads(shown.stdout)]
    command = "Bash: touch approved.txt && echo made it"
    assert details[0] == f"{command} (asked)", details
    assert details[1].startswith(f"{command} (approved by "), details
    again = bloom(stack, "approvals", "approve", approval["id"])
    assert again.returncode == 1
    assert "409" in again.stderr or "already" in again.stderr


def test_a_denial_reaches_the_agent_with_its_note(stack: Stack) -> None:
    stack.add_worker("w1")
    asked = stack.submit("ask-2 " + shell("touch denied.txt"), policy=ASK)
    approval = pending(stack, asked)
    denied = bloom(stack, "approvals", "deny", approval["id"], "--note", "not on this box")
    assert denied.returncode == 0, denied.stderr
    done = stack.wait(asked, timeout=90)
    assert done["status"] == "completed", stack.logs()[-4000:]
    assert made(stack, "denied.txt") == []
    assert "not on this box" in stack.output(asked)
    shown = bloom(stack, "task", "show", asked, "--tools")
    assert "Bash: touch denied.txt (denied by " in shown.stdout, shown.stdout


def test_a_worker_killed_while_its_task_waits_loses_nothing(stack: Stack) -> None:
    worker = stack.add_worker("w1")
    asked = stack.submit("ask-3 " + shell("touch after-restart.txt && echo again"), policy=ASK)
    approval = pending(stack, asked)
    worker.kill(signal.SIGKILL)
    worker.start()  # the same node, its sessions kept on disk
    approved = bloom(stack, "approvals", "approve", approval["id"])
    assert approved.returncode == 0, approved.stderr
    done = stack.wait(asked, timeout=90)
    assert done["status"] == "completed", stack.logs()[-4000:]
    assert stack.output(asked) == "echo: again"
    assert len(made(stack, "after-restart.txt")) == 1
    wait_for(lambda: stack.task(asked)["status"] == "completed", 5, "still completed")


def test_no_decision_in_time_denies_the_call_or_fails_the_task(stack: Stack) -> None:
    stack.add_worker("w1")
    quick = {"tools": {"ask": ["Bash(touch:*)"], "approval_timeout_sec": 1}}
    denied = stack.submit("ask-4 " + shell("touch late.txt"), policy=quick)
    failing = {"tools": quick["tools"] | {"on_timeout": "fail"}}
    failed = stack.submit("ask-5 " + shell("touch later.txt"), policy=failing)
    done = stack.wait(denied, timeout=90)
    assert done["status"] == "completed", stack.logs()[-4000:]
    assert "No decision came in time" in stack.output(denied)
    ended = stack.wait(failed, timeout=90)
    assert ended["status"] == "failed"
    assert "No decision on Bash: touch later.txt in time" in ended["last_error"]
    assert made(stack, "late.txt") == []
    assert made(stack, "later.txt") == []


def test_a_remembered_call_runs_unasked_in_its_context_and_mcp_decides(stack: Stack) -> None:
    stack.add_worker("w1")
    call = shell("echo remembered")
    first = stack.submit("ask-6 " + call, policy={"tools": {"ask": ["Bash"]}}, context_id="ctx-r")
    approval = pending(stack, first)
    decided = asyncio.run(decide_over_mcp(stack, approval["id"]))
    assert decided["status"] == "approved"
    assert decided["remember"] is True
    assert stack.wait(first, timeout=90)["status"] == "completed"
    # the same call, in a later task of the context: no one is asked again
    later = stack.submit("ask-7 " + call, policy={"tools": {"ask": ["Bash"]}}, context_id="ctx-r")
    assert stack.wait(later, timeout=90)["status"] == "completed", stack.logs()[-4000:]
    assert stack.output(later) == "echo: remembered"
    assert json.loads(bloom(stack, "approvals", "list", "--task", later, "--json").stdout) == []


async def decide_over_mcp(stack: Stack, approval_id: str) -> dict[str, Any]:
    """`decide_approval` through the MCP SDK's own client and `bloom mcp` over stdio."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("API_KEY")}
    env["BLOOM_RUNTIME_URL"] = stack.runtime.url
    server = StdioServerParameters(command=BLOOM[0], args=[*BLOOM[1:], "mcp"], env=env)
    async with Client(server) as client:
        listed = await client.call_tool("list_approvals", {})
        assert approval_id in json.dumps(listed.structured_content)
        answer = await client.call_tool(
            "decide_approval",
            {"approval_id": approval_id, "decision": "approve", "remember": True},
        )
        assert not answer.is_error, answer.content
        assert answer.structured_content is not None
        return dict(answer.structured_content)


def test_a_worker_killed_while_the_approved_call_runs_does_not_run_it_again(
    stack: Stack,
) -> None:
    worker = stack.add_worker("w1")
    command = "echo once >> runs.txt && sleep 8 && echo finished"
    asked = stack.submit("ask-8 " + shell(command), policy={"tools": {"ask": ["Bash"]}})
    approval = pending(stack, asked)
    assert bloom(stack, "approvals", "approve", approval["id"]).returncode == 0
    stack.wait(asked, {"leased", "running"}, timeout=60)
    wait_for(lambda: made(stack, "runs.txt"), 30, "the approved call started")
    worker.kill(signal.SIGKILL)  # mid-call
    worker.start()
    done = stack.wait(asked, timeout=120)
    assert done["status"] == "completed", stack.logs()[-4000:]
    (runs,) = made(stack, "runs.txt")
    assert runs.read_text() == "once\n"  # the call never ran a second time
    assert "not run again without a new decision" in stack.output(asked)


def test_a_write_allowed_a_fetch_denied_and_a_command_asked_in_one_run(stack: Stack) -> None:
    stack.add_worker("w1")
    target = stack.data_dir / "note.txt"
    note = f'[[tool Write {{"file_path": "{target}", "content": "written"}}]]'
    fetch = '[[tool WebFetch {"url": "https://example.com/", "prompt": "read it"}]]'
    tools = {"allow": ["Write"], "deny": ["WebFetch"], "ask": ["Bash"]}
    asked = stack.submit(f"ask-10 {note} {fetch} " + shell("echo asked"), policy={"tools": tools})
    approval = pending(stack, asked)
    assert approval["tool_input"] == {"command": "echo asked"}
    written = made(stack, "note.txt")  # the allowed Write ran before the run stopped
    assert [path.read_text() for path in written] == ["written"]
    assert bloom(stack, "approvals", "approve", approval["id"]).returncode == 0
    done = stack.wait(asked, timeout=90)
    assert done["status"] == "completed", stack.logs()[-4000:]
    assert stack.output(asked) == "echo: asked"
    shown = bloom(stack, "task", "show", asked, "--tools").stdout
    assert f"Write: {target} (allowed)" in shown, shown
    assert "WebFetch: https://example.com/ (denied)" in shown, shown


def test_a_runtime_killed_while_a_task_waits_loses_nothing(stack: Stack) -> None:
    stack.add_worker("w1")
    asked = stack.submit("ask-11 " + shell("echo survived"), policy={"tools": {"ask": ["Bash"]}})
    approval = pending(stack, asked)
    stack.runtime.kill(signal.SIGKILL)
    stack.runtime.start()
    assert stack.task(asked)["status"] == "awaiting_approval"
    assert bloom(stack, "approvals", "approve", approval["id"]).returncode == 0
    done = stack.wait(asked, timeout=90)
    assert done["status"] == "completed", stack.logs()[-4000:]
    assert stack.output(asked) == "echo: survived"
