"""A Claude run of a task with `ask` rules (docs/approvals.md): the settings that make the CLI
stop at such a call, and let a resumed run apply the decisions made on them.

The CLI is given, inline (`--settings JSON`): the task's `ask` rules as its own
`permissions.ask` (so that, headless, a call they cover is refused if nothing defers it: never
run unasked), and the worker's hook (`bloom.worker.approval_hook`) for PreToolUse (defer a call
an `ask` rule covers; allow or deny a decided one) and PermissionRequest (allow exactly an
approved call). Hooks do not run under `--bare`, so such a run goes without it.
"""

import json
import shlex
import sys
from collections.abc import Sequence

from bloom.worker.agents.base import Decision

HOOK_MODULE = "bloom.worker.approval_hook"
BARE = "--bare"


def settings(ask: Sequence[str], decisions: Sequence[Decision]) -> str:
    """The `--settings` JSON for a run."""
    plan = {
        "ask": list(ask),
        "decisions": [
            {
                "id": decision.call_id,
                "allow": decision.allow,
                "reason": decision.reason,
                "tool": decision.tool,
                "digest": decision.input_digest,
                "remember": decision.remember,
            }
            for decision in decisions
        ],
    }
    command = shlex.join([sys.executable, "-m", HOOK_MODULE, json.dumps(plan)])
    hook = [{"matcher": "*", "hooks": [{"type": "command", "command": command}]}]
    return json.dumps(
        {
            "permissions": {"ask": list(ask)},
            "hooks": {"PreToolUse": hook, "PermissionRequest": hook},
        }
    )


def without_bare(args: Sequence[str]) -> list[str]:
    """The fleet's arguments less `--bare`, under which the CLI runs no hooks."""
    return [arg for arg in args if arg != BARE]
