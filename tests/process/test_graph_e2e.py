"""A task graph run by a real worker and the real Claude CLI against the echo model (which
answers `echo: <prompt>`): B, submitted with `bloom task submit --after A --with-artifacts`, waits
blocked until A completes, and the prompt its CLI received holds A's answer in a block naming A,
with A's artifact; a fan-in then
gets both answers. The whole graph is made in one batch, on each database."""

from typing import Any

from typer.testing import CliRunner

from bloom.cli.main import app
from tests.support.stack import Stack

NO_KEY: dict[str, str | None] = {"BLOOM_API_KEY": None, "RUNTIME_API_KEY": None}


def submit_after(stack: Stack, prompt: str, *after: str, options: tuple[str, ...] = ()) -> str:
    args = ["task", "submit", prompt, "--url", stack.runtime.url, *options]
    for task_id in after:
        args += ["--after", task_id]
    result = CliRunner().invoke(app, args, env=NO_KEY)
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


def test_b_waits_for_a_and_its_cli_gets_a_s_answer(stack: Stack) -> None:
    first = stack.submit("the word is lighthouse [[sleep 2]]")
    alone = ["task", "submit", "x", "--with-artifacts", "--url", stack.runtime.url]
    refused = CliRunner().invoke(app, alone, env=NO_KEY)
    assert refused.exit_code == 2
    assert "--with-artifacts needs --after" in refused.output
    second = submit_after(stack, "repeat the word", first, options=("--with-artifacts",))
    assert stack.task(second)["status"] == "blocked"
    stack.add_worker("w1")
    done = stack.wait(second, timeout=120)
    assert done["status"] == "completed", stack.logs()[-3000:]
    assert stack.task(first)["status"] == "completed"
    answer = stack.output(second)
    # the echo of B's prompt: A's block (naming A, holding A's answer), then B's own prompt
    assert answer.startswith("echo: The tasks this task depends on have ended")
    assert f'<dependency task="{first}" status="completed">' in answer
    assert "echo: the word is lighthouse" in answer
    assert answer.rstrip().endswith("repeat the word")
    # --with-artifacts: A's artifact named in its block (its content is the answer itself)
    [artifact] = stack.http.get("/artifacts", params={"task_id": first}).json()
    assert f'<artifact id="{artifact["id"]}" type="LLM_RESULT" bytes="' in answer
    assert "(its content is the answer above)\n</artifact>\n</dependency>" in answer
    graph = stack.http.get(f"/llm-tasks/{second}/graph").json()
    assert [(node["id"], node["status"]) for node in graph["upstream"]] == [(first, "completed")]
    assert graph["upstream"][0]["with_artifacts"] is True


def test_a_diamond_made_in_one_batch_is_drained_by_two_workers(stack: Stack) -> None:
    def task(prompt: str, ref: str, *after: str) -> dict[str, Any]:
        body = {"context_id": f"ctx-{ref}", "agent_slug": "default", "prompt": prompt, "ref": ref}
        return body | ({"depends_on": list(after)} if after else {})

    made = stack.http.post(
        "/llm-tasks/batch",
        json={
            "tasks": [
                task("plan it", "plan"),
                task("left part", "left", "plan"),
                task("right part", "right", "plan"),
                task("review both", "review", "left", "right"),
            ]
        },
    )
    assert made.status_code == 201, made.text
    ids = [t["id"] for t in made.json()["tasks"]]
    assert [t["status"] for t in made.json()["tasks"]] == [
        "queued",
        "blocked",
        "blocked",
        "blocked",
    ]
    stack.add_worker("w1")
    stack.add_worker("w2")
    review = stack.wait(ids[3], timeout=180)
    assert review["status"] == "completed", stack.logs()[-3000:]
    answer = stack.output(ids[3])
    assert 'ref="left"' in answer
    assert 'ref="right"' in answer
    # each block holds its task's answer: the echo of its own composed prompt
    assert "left part\n</dependency>" in answer
    assert "right part\n</dependency>" in answer
    assert answer.rstrip().endswith("review both")
    leases = stack.http.get("/leases").json()
    for task_id in ids:
        assert stack.task(task_id)["status"] == "completed"
        assert stack.task(task_id)["attempts"] == 1
        # each ran exactly once
        assert [lease["task_id"] for lease in leases].count(task_id) == 1
