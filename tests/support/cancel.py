"""A running agent CLI cancelled through the API, for every CLI alike: the task ends cancelled,
and nothing of the run is left: no process works in its directory any more."""

import os
from pathlib import Path

from tests.support.stack import Stack, wait_for
from tests.support.worker import WorkerProcess


def processes_in(directory: Path) -> list[int]:
    """Pids of live processes whose working directory is inside `directory`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if Path(os.readlink(proc / "cwd")).is_relative_to(directory):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def check_a_cancel_stops_the_run(stack: Stack, worker: WorkerProcess, cli: str) -> None:
    """A task whose model call hangs, cancelled once its CLI is waiting for the model: it ends
    `cancelled` and the CLI's whole process group is gone."""
    asked = len(stack.model.requests())
    task_id = stack.submit("hang [[sleep 60]]", cli=cli, max_attempts=1)
    stack.wait(task_id, {"running"}, timeout=60)
    wait_for(lambda: len(stack.model.requests()) > asked, 60, "the CLI's call to the model")
    assert processes_in(worker.work_dir / "tasks"), "the CLI runs"
    cancelled = stack.http.post(f"/llm-tasks/{task_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    task = stack.wait(task_id, timeout=60)
    assert task["status"] == "cancelled", task
    wait_for(lambda: not processes_in(worker.work_dir / "tasks"), 15, "the CLI's processes gone")
