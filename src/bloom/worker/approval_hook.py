"""The Claude CLI's hook for a task with `ask` rules (docs/approvals.md), run by the CLI itself
for each tool call: `python -m bloom.worker.approval_hook PLAN` with the hook's JSON on stdin.

- PreToolUse: a call a decision was made for (its `tool_use_id`, in the session it was made
  in; or, remembered, the same call in the context) is allowed or denied with the person's
  note; another call an `ask` rule covers is deferred (the run ends, `stop_reason:
  "tool_deferred"`, and the worker asks a person); any other call is left to the CLI.
- PermissionRequest: the CLI's own `ask` rules (the same ones, in its settings) ask again for
  an approved call; this allows exactly the approved calls, and leaves the rest to the CLI,
  which refuses them in `-p` mode. So a call `asks` misses is refused, never run unasked.

The plan (the worker's, for the run, given as the argument) is JSON: `{"ask": [rules],
"decisions": [{"id", "allow", "reason", "tool", "digest", "remember"}]}`, the decisions that
apply to this run (`agents.claude.approvals`). Only the standard library and the domain's
`tool_policy` and `approvals` are imported: the CLI starts this once per call.
"""

import json
import sys
from collections.abc import Mapping
from typing import Any

from bloom.domain.approvals import input_digest
from bloom.domain.tool_policy import asks

PRE = "PreToolUse"
PERMISSION = "PermissionRequest"


def answer(event: Mapping[str, Any], plan: Mapping[str, Any]) -> dict[str, Any] | None:
    """The hook's output for `event` under `plan` (None: nothing to say, the CLI decides)."""
    kind = event.get("hook_event_name")
    tool = str(event.get("tool_name", ""))
    tool_input = event.get("tool_input") or {}
    decisions: list[Mapping[str, Any]] = list(plan.get("decisions") or [])
    if kind == PERMISSION:
        if any(_approves(ruling, tool, tool_input) for ruling in decisions):
            return {"hookSpecificOutput": {"hookEventName": PERMISSION, "decision": _ALLOW}}
        return None
    if kind != PRE:
        return None
    ruling = _ruling_for(decisions, str(event.get("tool_use_id", "")), tool, tool_input)
    if ruling is not None:
        if ruling.get("allow"):
            return _pre("allow", "Approved by a person")
        return _pre("deny", str(ruling.get("reason") or "Denied by a person"))
    for rule in plan.get("ask") or ():
        if asks(str(rule), tool, tool_input):
            return _pre("defer", f"{rule} is in the task's ask rules: a person decides")
    return None


_ALLOW = {"behavior": "allow"}


def _pre(decision: str, reason: str) -> dict[str, Any]:
    return {
        "hookSpecificOutput": {
            "hookEventName": PRE,
            "permissionDecision": decision,
            "permissionDecisionReason": reason,
        }
    }


def _ruling_for(
    decisions: list[Mapping[str, Any]], tool_use_id: str, tool: str, tool_input: Any
) -> Mapping[str, Any] | None:
    for ruling in decisions:
        if tool_use_id and ruling.get("id") == tool_use_id:
            return ruling
    for ruling in decisions:
        if ruling.get("remember") and _approves(ruling, tool, tool_input):
            return ruling
    return None


def _approves(ruling: Mapping[str, Any], tool: str, tool_input: Any) -> bool:
    return (
        bool(ruling.get("allow"))
        and ruling.get("tool") == tool
        and ruling.get("digest") == input_digest(tool_input)
    )


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m bloom.worker.approval_hook PLAN_JSON", file=sys.stderr)
        return 2
    plan = json.loads(argv[1])
    event = json.load(sys.stdin)
    said = answer(event, plan)
    if said is not None:
        sys.stdout.write(json.dumps(said))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
