"""Tool rules checked, a project's defaults merged with a task's (deny wins), and the CLI's
flags made from the result (docs/approvals.md)."""

import pytest

from bloom.domain.tool_policy import (
    MAX_RULE_CHARS,
    MAX_RULES,
    PolicyProblem,
    ProjectToolPolicy,
    ToolPolicy,
    asks,
    cli_args,
    effective,
    rule_problem,
    rules_problem,
)
from bloom.worker.agents.claude.invocation import claude_args


def project(**fields: object) -> ProjectToolPolicy:
    values: dict[str, object] = {
        "project": "alpha",
        "allow": (),
        "deny": (),
        "ask": (),
        "mode": None,
        "max_turns": None,
        "allow_bypass": False,
        "updated_at": 1,
        "updated_by": "admin",
    }
    return ProjectToolPolicy(**(values | fields))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "rule",
    [
        "Bash",
        "Edit",
        "Bash(git push:*)",
        "Bash(npm run test:*)",
        "WebFetch(domain:example.com)",
        "Edit(src/**)",
        "Read(./.env)",
        "mcp__github__create_issue",
        "mcp__my-server",
        "Bash(echo (nested) parens)",
        "Bash(touch a,b.txt)",
    ],
)
def test_well_formed_rules_pass(rule: str) -> None:
    assert rule_problem(rule) is None


@pytest.mark.parametrize(
    ("rule", "says"),
    [
        ("", "empty"),
        ("Bash(", "must end"),
        ("Bash()", "empty"),
        ("Bash(git push", "must end"),
        ("Bash(a))", "unbalanced"),
        ("Bash(a)(b)", "unbalanced"),
        ("Bash((a)", "unbalanced"),
        ("Bash Edit", "tool name"),
        ("Bash,Edit", "tool name"),
        ("--dangerously-skip-permissions", "tool name"),
        ("1Bash", "tool name"),
        ("Bash(ls)x", "must end"),
        ("Bash(ls\nrm -rf /)", "control character"),
        ("Bash(ls\x1b[2J)", "control character"),
        ("Bash(\u202e)", "control character"),
        ("B" * 129, "tool name"),
        ("Bash(" + "x" * MAX_RULE_CHARS + ")", "longer than"),
    ],
)
def test_bad_rules_are_named_with_what_is_wrong(rule: str, says: str) -> None:
    problem = rule_problem(rule)
    assert problem is not None
    assert says in problem
    if rule:
        assert repr(rule[:20])[1:-1] in problem  # the rule itself is named


def test_a_list_is_bounded_and_names_its_bad_rule() -> None:
    assert rules_problem(["Bash"] * MAX_RULES) is None
    assert "at most" in (rules_problem(["Bash"] * (MAX_RULES + 1)) or "")
    said = rules_problem(["Edit", "Web Fetch"]) or ""
    assert said.startswith("rule ")
    assert "'Web Fetch'" in said


def test_a_policy_checks_its_mode_turns_and_timeout() -> None:
    assert ToolPolicy(allow=("Bash",), mode="plan", max_turns=5).problem() is None
    assert "mode" in (ToolPolicy(mode="yolo").problem() or "")
    assert "max_turns" in (ToolPolicy(max_turns=0).problem() or "")
    assert "on_timeout" in (ToolPolicy(on_timeout="maybe").problem() or "")
    assert "allow" in (ToolPolicy(allow=("a b",)).problem() or "")


def test_neither_a_task_nor_its_project_having_rules_leaves_none() -> None:
    assert effective(None, None) is None


def test_a_projects_deny_wins_over_a_tasks_allow() -> None:
    task = ToolPolicy(allow=("Bash", "Bash(git push:*)", "Read", "Edit(src/**)"), deny=("X",))
    defaults = project(allow=("Read", "Grep"), deny=("Bash", "WebFetch"))
    merged = effective(task, defaults)
    assert merged is not None
    assert merged.deny == ("Bash", "WebFetch", "X")  # the union, the project's first
    # Bash and every Bash(...) rule dropped: the whole tool is denied
    assert merged.allow == ("Read", "Grep", "Edit(src/**)")


def test_a_narrow_deny_drops_only_the_same_rule() -> None:
    merged = effective(
        ToolPolicy(allow=("Bash(git push:*)", "Bash(git status)")),
        project(deny=("Bash(git push:*)",)),
    )
    assert merged is not None
    assert merged.allow == ("Bash(git status)",)


def test_the_tasks_mode_and_turns_win_else_the_projects_apply() -> None:
    defaults = project(mode="plan", max_turns=10)
    assert effective(None, defaults) == ToolPolicy(mode="plan", max_turns=10)
    mine = effective(ToolPolicy(mode="acceptEdits", max_turns=3), defaults)
    assert mine is not None
    assert (mine.mode, mine.max_turns) == ("acceptEdits", 3)
    alone = effective(ToolPolicy(allow=("Read",)), None)
    assert alone == ToolPolicy(allow=("Read",))


def test_bypass_only_where_the_project_allows_it() -> None:
    with pytest.raises(PolicyProblem, match="bypassPermissions is not allowed"):
        effective(ToolPolicy(mode="bypassPermissions"), None)
    with pytest.raises(PolicyProblem, match="'alpha'"):
        effective(ToolPolicy(mode="bypassPermissions"), project())
    allowed = effective(ToolPolicy(mode="bypassPermissions"), project(allow_bypass=True))
    assert allowed is not None
    assert allowed.mode == "bypassPermissions"
    assert "allow_bypass" in (project(mode="bypassPermissions").problem() or "")


def test_ask_rules_are_kept_unless_denied_anyway() -> None:
    merged = effective(ToolPolicy(ask=("Bash(git push:*)",)), project(ask=("WebFetch",)))
    assert merged is not None
    assert merged.ask == ("WebFetch", "Bash(git push:*)")
    assert project(ask=("Bash",)).problem() is None
    # an ask rule the project denies outright asks nothing: it is dropped
    merged = effective(ToolPolicy(ask=("Bash(rm:*)",)), project(deny=("Bash",)))
    assert merged is not None
    assert merged.ask == ()


def test_the_stored_form_reads_back() -> None:
    policy = ToolPolicy(allow=("Read",), deny=("Bash",), mode="plan", max_turns=4)
    assert policy.to_json() == {
        "allow": ["Read"],
        "deny": ["Bash"],
        "ask": [],
        "mode": "plan",
        "max_turns": 4,
    }
    assert ToolPolicy.from_json(policy.to_json()) == policy


def test_the_cli_gets_one_flag_per_rule_then_mode_and_turns() -> None:
    policy = ToolPolicy(
        allow=("Bash(git push:*)", "Read"), deny=("WebFetch",), mode="plan", max_turns=7
    )
    assert cli_args(policy) == [
        "--allowedTools",
        "Bash(git push:*)",
        "--allowedTools",
        "Read",
        "--disallowedTools",
        "WebFetch",
        "--permission-mode",
        "plan",
        "--max-turns",
        "7",
    ]
    assert cli_args(ToolPolicy()) == []


def test_fleet_args_come_first_and_a_tasks_mode_replaces_the_fleets() -> None:
    fleet = ["--bare", "--dangerously-skip-permissions", "--permission-mode", "acceptEdits"]
    planned = ToolPolicy(deny=("Bash",), mode="default")
    assert claude_args(fleet, planned, workspace=True) == [
        "--bare",
        "--disallowedTools",
        "Bash",
        "--permission-mode",
        "default",
    ]
    assert claude_args(["--permission-mode=plan", "-x"], planned, workspace=False)[:1] == ["-x"]


def test_without_a_task_mode_the_fleets_stays_and_deny_is_added() -> None:
    fleet = ["--bare", "--dangerously-skip-permissions"]
    denied = ToolPolicy(deny=("Bash",))
    assert claude_args(fleet, denied, workspace=True) == [*fleet, "--disallowedTools", "Bash"]


def test_a_workspace_task_without_a_mode_runs_in_accept_edits() -> None:
    assert claude_args(["--bare"], None, workspace=True) == [
        "--bare",
        "--permission-mode",
        "acceptEdits",
    ]
    assert claude_args(["--bare"], None, workspace=False) == ["--bare"]
    read_only = ToolPolicy(allow=("Read",))
    assert claude_args([], read_only, workspace=True) == [
        "--permission-mode",
        "acceptEdits",
        "--allowedTools",
        "Read",
    ]
    assert claude_args([], ToolPolicy(mode="plan"), workspace=True) == [
        "--permission-mode",
        "plan",
    ]


@pytest.mark.parametrize(
    ("rule", "tool", "tool_input", "expected"),
    [
        ("Bash", "Bash", {"command": "ls"}, True),
        ("Bash", "Edit", {"file_path": "a"}, False),
        ("Bash(git push:*)", "Bash", {"command": "git push origin main"}, True),
        ("Bash(git push:*)", "Bash", {"command": "git status && git push"}, True),
        ("Bash(git push:*)", "Bash", {"command": "echo $(git push -f)"}, True),
        ("Bash(git push:*)", "Bash", {"command": "git status"}, False),
        ("Bash(npm test)", "Bash", {"command": "npm test"}, True),
        ("Bash(npm test)", "Bash", {"command": "npm install"}, False),
        ("WebFetch(domain:example.com)", "WebFetch", {"url": "https://api.example.com/x"}, True),
        ("WebFetch(domain:example.com)", "WebFetch", {"url": "https://example.org/x"}, False),
        ("Edit(src/**)", "Edit", {"file_path": "/work/repo/src/a/b.py"}, True),
        ("Edit(src/**)", "Edit", {"file_path": "/work/repo/docs/a.md"}, False),
        ("Write(*.env)", "Write", {"file_path": "/w/.env", "content": "x"}, True),
    ],
)
def test_asks_errs_towards_asking(
    rule: str, tool: str, tool_input: dict[str, str], expected: bool
) -> None:
    assert asks(rule, tool, tool_input) is expected
