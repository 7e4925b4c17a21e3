"""A run's tool calls as its events pass, and how each was decided (worker.tool_log)."""

from bloom.domain.approvals import TIMED_OUT_NOTE
from bloom.domain.tool_calls import Ruled
from bloom.worker.agents.base import EventKind, agent_event
from bloom.worker.tool_log import ToolLog


def call(call_id: str, command: str) -> dict[str, object]:
    return agent_event(EventKind.TOOL_CALL, id=call_id, name="Bash", input={"command": command})


def answer(call_id: str, output: str, is_error: bool = False) -> dict[str, object]:
    return agent_event(EventKind.TOOL_RESULT, id=call_id, output=output, is_error=is_error)


def test_each_call_is_recorded_with_how_it_was_decided() -> None:
    log = ToolLog()
    log.saw([call("a", "ls"), answer("a", "x")])
    log.saw([call("b", "rm -rf /"), answer("b", "Permission to use Bash has been denied", True)])
    log.saw([call("c", "git push"), answer("c", "done")])
    log.saw([call("d", "make"), answer("d", "make: *** Error 2", True)])
    log.saw([call("e", "curl x")])
    log.saw([call("f", "sleep 9"), answer("f", "Denied by a person", True)])
    rulings = [
        {"tool_use_id": "c", "decision": "approve", "decided_by": "pat"},
        {"tool_use_id": "f", "decision": "deny", "note": TIMED_OUT_NOTE, "decided_by": "runtime"},
    ]
    record = log.record(rulings, pending_id="e")
    assert [(c.id, c.ruled, c.decided_by, c.failed) for c in record] == [
        ("a", Ruled.ALLOWED, None, False),
        ("b", Ruled.DENIED, None, False),
        ("c", Ruled.APPROVED, "pat", False),
        ("d", Ruled.ALLOWED, None, True),
        ("e", Ruled.ASKED, None, False),
        ("f", Ruled.TIMED_OUT, None, False),
    ]
    assert record[2].detail() == "Bash: git push (approved by pat)"
    assert record[3].detail() == "Bash: make (allowed, failed)"


def test_a_resumed_runs_decided_call_is_recorded_from_its_answer() -> None:
    log = ToolLog()
    log.saw([answer("z", "made it"), call("y", "ls"), answer("y", "")])
    ruling = {"tool_use_id": "z", "tool_name": "Bash", "tool_input": {"command": "touch a"}}
    record = log.record([ruling | {"decision": "approve", "decided_by": "pat"}], None)
    assert [(c.id, c.summary, c.ruled) for c in record] == [
        ("z", "Bash: touch a", Ruled.APPROVED),
        ("y", "Bash: ls", Ruled.ALLOWED),
    ]
