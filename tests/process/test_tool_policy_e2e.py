"""A task's tool policy reaches the real Claude CLI as its own flags (issue 33, step 1), against
the echo model scripting the tool calls: a denied call is refused by the CLI's own permission
check (the command never runs, and the tool result the model is sent says so), an allowed one
runs, and a fleet-wide bypass (BLOOM_CLAUDE_ARGS) does not override a task's deny."""

from pathlib import Path
from typing import Any

from tests.support.stack import Stack


def shell(command: str) -> str:
    return f'[[tool Bash {{"command": "{command}"}}]]'


def run(stack: Stack, prompt: str, tools: dict[str, Any] | None = None) -> dict[str, Any]:
    policy = {"tools": tools} if tools is not None else {}
    task_id = stack.submit(prompt, policy=policy)
    task = stack.wait(task_id, timeout=90)
    assert task["status"] == "completed", (task, stack.logs()[-4000:])
    return task


def made(stack: Stack, name: str) -> list[Path]:
    """Where the runs made a file of that name (a task runs in a directory of its own)."""
    return list(stack.data_dir.rglob(name))


def tool_results_sent(stack: Stack, marker: str) -> list[str]:
    """The tool results the CLI sent the model for calls of the prompt holding `marker`."""
    results = []
    for request in stack.model.requests():
        body = request.get("body", request)
        messages = body.get("messages", [])
        if marker not in str(messages[:1]):
            continue
        for message in messages:
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    results.append(str(block.get("content")))
    return results


def test_a_denied_call_is_refused_by_the_cli_and_an_allowed_one_runs(stack: Stack) -> None:
    stack.add_worker("w1")  # BLOOM_CLAUDE_ARGS: --bare (Bash, Edit and Read), default mode
    # the whole tool denied: the CLI does not even offer it, and the command never runs
    denied = run(stack, "deny-1 " + shell("touch denied.txt"), {"deny": ["Bash"]})
    assert made(stack, "denied.txt") == []
    assert "Bash is disabled for this session" in stack.output(denied["id"])
    assert any("No such tool available: Bash" in r for r in tool_results_sent(stack, "deny-1"))
    assert denied["policy"]["tools"]["deny"] == ["Bash"]

    # in default mode a command that writes a file asks, and headless nobody answers ...
    run(stack, "plain-1 " + shell("touch asked.txt"))
    assert made(stack, "asked.txt") == []
    # ... unless an allow rule covers it: then the CLI runs it
    allowed = run(stack, "allow-1 " + shell("touch allowed.txt"), {"allow": ["Bash(touch:*)"]})
    assert len(made(stack, "allowed.txt")) == 1
    assert allowed["policy"]["tools"]["allow"] == ["Bash(touch:*)"]

    # a narrower deny beats a broader allow (the CLI puts deny first)
    narrow = {"allow": ["Bash"], "deny": ["Bash(touch:*)"]}
    refused = run(stack, "narrow-1 " + shell("touch narrow.txt"), narrow)
    assert made(stack, "narrow.txt") == []
    said = stack.output(refused["id"])
    assert "Permission to use Bash with command touch narrow.txt has been denied" in said


def test_a_fleet_bypass_does_not_override_a_tasks_deny(stack: Stack) -> None:
    stack.add_worker(
        "w1",
        BLOOM_CLAUDE_ARGS='["--bare", "--dangerously-skip-permissions"]',
        # the CLI refuses to bypass as root outside a sandbox it is told of
        BLOOM_CLAUDE_ENV="IS_SANDBOX",
        IS_SANDBOX="1",
    )
    # the fleet bypasses: a task without rules writes its file unasked
    run(stack, "fleet-1 " + shell("touch fleet.txt"))
    assert len(made(stack, "fleet.txt")) == 1
    # a task's deny still holds
    denied = run(stack, "deny-2 " + shell("touch nope.txt"), {"deny": ["Bash(touch:*)"]})
    assert made(stack, "nope.txt") == []
    assert "has been denied" in stack.output(denied["id"])
    # and a task's own mode replaces the fleet's bypass: in default mode the write asks
    mode = run(stack, "mode-1 " + shell("touch moded.txt"), {"mode": "default"})
    assert made(stack, "moded.txt") == []
    assert "needs approval" in stack.output(mode["id"])
