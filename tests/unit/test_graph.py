"""Task graphs, the pure part (`domain/graph.py`): a batch's dependencies resolved and refused
(refs, names twice, bounds, cycles, each naming its field), and the answers' blocks put before a
dependent's prompt with their cuts (each answer, all of them, never silently), with the
artifacts asked for; the order a batch is made in and each task's start from its
dependencies' states; and a workspace task's start from its dependencies (`domain/workspace.py`):
one branch of its repository, or refused."""

import itertools
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloom.domain.graph import (
    MAX_ANSWER_CHARS,
    MAX_ANSWERS_CHARS,
    MAX_BATCH_DEPENDENCIES,
    MAX_DEPENDENCIES,
    Answer,
    GraphProblem,
    OnDependencyFailure,
    PassedArtifact,
    Planned,
    Start,
    compose,
    plan,
    start_of,
)
from bloom.domain.states import TaskStatus
from bloom.domain.workspace import other_branch_dependencies, start_problem


def refused(tasks: list[Planned], **options: str) -> GraphProblem:
    with pytest.raises(GraphProblem) as caught:
        plan(tasks, **options)
    return caught.value


# --- plan: refs, names, bounds --------------------------------------------------------------


def test_dependency_artifacts_name_tasks_of_depends_on_once() -> None:
    edges = plan([Planned("a", []), Planned("b", ["a", "x"], with_artifacts=["x", "a"])])
    assert (edges.in_batch, edges.existing) == ([[], [0]], [[], ["x"]])
    outside = refused([Planned("a", []), Planned("b", ["a"], with_artifacts=["c"])])
    assert (outside.field, outside.message) == (
        "tasks.1.dependency_artifacts",
        '"c" is not named in depends_on',
    )
    twice = refused([Planned(None, ["x"], with_artifacts=["x", "x"])], field_of="")
    assert (twice.field, twice.message) == ("dependency_artifacts", '"x" is named twice')
    alone = refused([Planned(None, [], with_artifacts=["x"])], field_of="")
    assert alone.field == "dependency_artifacts"


def test_refs_resolve_to_batch_indexes_and_other_names_to_existing_ids() -> None:
    edges = plan(
        [
            Planned("review", ["left", "right", "0190-old"]),  # named before they come
            Planned("left", ["plan"]),
            Planned("right", ["plan"]),
            Planned("plan", []),
            Planned(None, ["0190-other"]),
        ]
    )
    assert edges.in_batch == [[1, 2], [3], [3], [], []]
    assert edges.existing == [["0190-old"], [], [], [], ["0190-other"]]
    assert edges.existing_ids() == {"0190-old", "0190-other"}


def test_a_ref_used_twice_names_the_second() -> None:
    problem = refused([Planned("a", []), Planned("b", []), Planned("a", [])])
    assert problem.field == "tasks.2.ref"
    assert "tasks 0 and 2" in problem.message


def test_a_name_given_twice_and_a_task_naming_itself_are_refused() -> None:
    twice = refused([Planned("a", []), Planned("b", ["a", "a"])])
    assert (twice.field, twice.message) == ("tasks.1.depends_on", '"a" is named twice')
    itself = refused([Planned("a", ["a"])])
    assert itself.field == "tasks.0.depends_on"
    assert "itself" in itself.message


def test_a_single_create_names_its_own_field() -> None:
    problem = refused([Planned(None, ["x", "x"])], field_of="")
    assert problem.field == "depends_on"


def test_the_bound_on_one_task_s_dependencies_is_inclusive() -> None:
    names = [f"t{i}" for i in range(MAX_DEPENDENCIES)]
    assert len(plan([Planned(None, names)]).existing[0]) == MAX_DEPENDENCIES
    problem = refused([Planned("a", []), Planned(None, [*names, "one-more"])])
    assert problem.field == "tasks.1.depends_on"
    assert f"{MAX_DEPENDENCIES + 1} dependencies" in problem.message


def test_the_bound_on_a_batch_s_dependencies_in_all() -> None:
    each = MAX_BATCH_DEPENDENCIES // MAX_DEPENDENCIES
    names = [f"t{i}" for i in range(MAX_DEPENDENCIES)]
    at_bound = [Planned(None, names) for _ in range(each)]
    assert len(plan(at_bound).existing) == each
    problem = refused([*at_bound, Planned(None, ["t0"])])
    assert problem.field == "tasks"
    assert f"{MAX_BATCH_DEPENDENCIES + 1} dependencies in the batch" in problem.message


# --- plan: cycles -----------------------------------------------------------------------------


def test_a_cycle_is_named_in_the_order_it_runs() -> None:
    problem = refused([Planned("a", ["c"]), Planned("b", ["a"]), Planned("c", ["b"])])
    assert problem.field == "tasks.0.depends_on"
    assert problem.message == "dependency cycle: a -> c -> b -> a"


def test_a_cycle_among_later_tasks_is_found_past_an_acyclic_start() -> None:
    problem = refused(
        [
            Planned("root", []),
            Planned("x", ["root", "z"]),
            Planned("y", ["x"]),
            Planned("z", ["y"]),
        ]
    )
    assert problem.message == "dependency cycle: x -> z -> y -> x"
    assert problem.field == "tasks.1.depends_on"


def test_a_two_task_cycle() -> None:
    problem = refused([Planned("a", ["b"]), Planned("b", ["a"])])
    assert problem.message == "dependency cycle: a -> b -> a"


def test_diamonds_and_shared_dependencies_are_not_cycles() -> None:
    edges = plan(
        [
            Planned("top", []),
            Planned("left", ["top"]),
            Planned("right", ["top"]),
            Planned("bottom", ["left", "right", "top"]),
        ]
    )
    assert edges.in_batch == [[], [0], [0], [1, 2, 0]]


def test_a_long_chain_is_checked_without_recursion() -> None:
    count = 50_000  # far past Python's recursion limit
    tasks = [Planned("t0", [])] + [Planned(f"t{i}", [f"t{i - 1}"]) for i in range(1, count)]
    assert plan(tasks).in_batch[-1] == [count - 2]
    tasks[0] = Planned("t0", [f"t{count - 1}"])  # closed into a ring
    problem = refused(tasks)
    assert problem.message.startswith("dependency cycle: t0 -> t49999 -> t49998")
    assert problem.message.endswith("t1 -> t0")


@given(st.lists(st.lists(st.integers(0, 11), max_size=4, unique=True), min_size=1, max_size=12))
def test_plan_refuses_exactly_the_graphs_with_a_cycle(raw: list[list[int]]) -> None:
    """Against a plain reachability check: a graph is refused iff some task reaches itself,
    and the cycle named is a real one (each names the next)."""
    size = len(raw)
    deps = [sorted({j % size for j in row if j % size != i}) for i, row in enumerate(raw)]
    tasks = [Planned(f"n{i}", [f"n{j}" for j in row]) for i, row in enumerate(deps)]

    def reaches(start: int, goal: int) -> bool:
        seen, stack = set(), list(deps[start])
        while stack:
            node = stack.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                stack.extend(deps[node])
        return False

    cyclic = any(reaches(i, i) for i in range(size))
    try:
        plan(tasks)
    except GraphProblem as problem:
        assert cyclic
        names = re.fullmatch(r"dependency cycle: (.*)", problem.message)
        assert names is not None
        path = [int(name[1:]) for name in names.group(1).split(" -> ")]
        assert path[0] == path[-1]
        assert len(set(path[:-1])) == len(path) - 1
        for here, there in itertools.pairwise(path):
            assert there in deps[here]
    else:
        assert not cyclic
        order = plan(tasks).order()
        assert sorted(order) == list(range(size))
        assert all(order.index(j) < order.index(i) for i in range(size) for j in deps[i])


# --- the order a batch is made in, and how each task starts ---------------------------------


def test_a_batch_is_made_dependencies_first_otherwise_in_its_order() -> None:
    edges = plan([Planned("a", ["c"]), Planned("b", []), Planned("c", ["b"]), Planned("d", [])])
    assert edges.order() == [1, 2, 0, 3]


def test_a_task_whose_dependencies_all_completed_is_queued() -> None:
    named = [("t1", "a", True), ("t2", None, False)]
    ends = {"t1": (TaskStatus.COMPLETED, None), "t2": (TaskStatus.COMPLETED, None)}
    start = start_of(OnDependencyFailure.CANCEL, named, ends)
    assert start == Start(
        TaskStatus.QUEUED, [("t1", "a", True, True), ("t2", None, True, False)], 0
    )


def test_a_task_waits_blocked_on_what_has_not_ended() -> None:
    named = [("t1", None, False), ("t2", None, False)]
    ends = {"t1": (TaskStatus.RUNNING, None), "t2": (TaskStatus.COMPLETED, None)}
    start = start_of(OnDependencyFailure.CANCEL, named, ends)
    assert (start.status, start.waiting_on, start.cancelled_for) == (TaskStatus.BLOCKED, 1, None)


def test_a_failed_dependency_cancels_it_for_the_root_unless_it_runs_anyway() -> None:
    named = [("t1", None, False), ("t2", None, False), ("t3", None, False)]
    ends = {
        "t1": (TaskStatus.QUEUED, None),
        "t2": (TaskStatus.CANCELLED, "t0"),  # cancelled for t0's failure
        "t3": (TaskStatus.DEAD, None),
    }
    cancelled = start_of(OnDependencyFailure.CANCEL, named, ends)
    assert (cancelled.status, cancelled.cancelled_for, cancelled.reason) == (
        TaskStatus.CANCELLED,
        "t0",
        "Dependency t2 ended cancelled",
    )
    assert cancelled.waiting_on == 3
    anyway = start_of(OnDependencyFailure.RUN, named, ends)
    assert (anyway.status, anyway.waiting_on, anyway.cancelled_for) == (
        TaskStatus.BLOCKED,
        1,
        None,
    )
    assert [settled for _, _, settled, _ in anyway.edges] == [False, True, True]


# --- compose: the answers' blocks -------------------------------------------------------------


def done(task_id: str, output: str | None, ref: str | None = None, **more: object) -> Answer:
    return Answer(task_id=task_id, ref=ref, status="completed", output=output, **more)  # type: ignore[arg-type]


def blocks(text: str) -> list[str]:
    return re.findall(r"<dependency [^>]*>\n(.*?)\n</dependency>", text, flags=re.S)


def test_no_dependencies_no_change() -> None:
    assert compose("the prompt", []) == "the prompt"


def test_each_answer_in_its_block_in_the_order_named_then_the_prompt() -> None:
    text = compose(
        "review both",
        [
            done("t-2", "left's answer", ref="left"),
            Answer("t-1", None, "failed", None, error="it broke"),
            Answer("t-3", "gone", "cancelled", "ignored output", error=None),
        ],
    )
    head, *middle, prompt = text.split("\n\n")
    assert head == "The tasks this task depends on have ended; their answers:"
    assert prompt == "review both"
    assert middle == [
        '<dependency task="t-2" ref="left" status="completed">\nleft\'s answer\n</dependency>',
        '<dependency task="t-1" status="failed">\n'
        "This dependency did not complete (failed): it broke\n</dependency>",
        '<dependency task="t-3" ref="gone" status="cancelled">\n'
        "This dependency did not complete (cancelled).\n</dependency>",
    ]


def test_attributes_are_escaped() -> None:
    text = compose("p", [done('a"b', "x", ref='<r&"s>')])
    assert '<dependency task="a&quot;b" ref="&lt;r&amp;&quot;s>" status="completed">' in text


def test_a_completed_task_without_output_gives_an_empty_block() -> None:
    assert blocks(compose("p", [done("t", None)])) == [""]


def test_an_answer_at_the_bound_is_whole_and_one_past_it_is_cut_and_said() -> None:
    whole = "a" * MAX_ANSWER_CHARS
    assert blocks(compose("p", [done("t", whole)])) == [whole]
    [cut] = blocks(compose("p", [done("t", whole + "bc")]))
    assert cut == whole + "\n[... 2 more characters cut]"


def test_an_answer_read_short_says_at_least() -> None:
    """The repository reads MAX + 1 characters of an output: it may be longer still."""
    read = "z" * (MAX_ANSWER_CHARS + 1)
    [cut] = blocks(compose("p", [done("t", read, read_short=True)]))
    assert cut.endswith("\n[... at least 1 more characters cut]")
    assert cut.startswith("z" * MAX_ANSWER_CHARS + "\n")


def test_all_answers_together_are_bounded_and_what_is_left_out_is_said() -> None:
    per = MAX_ANSWER_CHARS
    fits = MAX_ANSWERS_CHARS // per
    answers = [done(f"t{i}", str(i % 10) * per) for i in range(fits)]
    answers.append(done("late", "L" * 10))
    answers.append(Answer("failed", None, "failed", None, error="E" * 50))
    got = blocks(compose("p", answers))
    assert got[:fits] == [str(i % 10) * per for i in range(fits)]
    assert got[fits:] == [
        "[10 characters cut: limit reached]",
        f"[{len('This dependency did not complete (failed): ') + 50} characters cut: "
        "limit reached]",
    ]
    assert sum(len(b) for b in got[:fits]) == MAX_ANSWERS_CHARS


def test_the_answer_that_crosses_the_total_is_cut_to_what_is_left() -> None:
    short = 1000
    big = MAX_ANSWER_CHARS
    fill = (MAX_ANSWERS_CHARS - short) // big  # 3 big answers, then 1000 short of the total
    answers = [done(f"b{i}", "b" * big) for i in range(fill)]
    answers.append(done("s", "s" * (MAX_ANSWERS_CHARS - fill * big - short)))
    answers.append(done("crossing", "c" * 5000))
    answers.append(done("after", "x"))
    got = blocks(compose("p", answers))
    assert got[-2] == "c" * short + "\n[... 4000 more characters cut]"
    assert got[-1] == "[1 characters cut: limit reached]"
    kept = sum(len(b) for b in got[:-2]) + short
    assert kept == MAX_ANSWERS_CHARS


@given(st.lists(st.integers(0, 3 * MAX_ANSWER_CHARS), min_size=1, max_size=8))
def test_what_is_passed_on_never_exceeds_the_bounds_and_every_cut_is_said(
    sizes: list[int],
) -> None:
    answers = [done(f"t{i}", "x" * size) for i, size in enumerate(sizes)]
    got = blocks(compose("p", answers))
    assert len(got) == len(sizes)  # none dropped
    kept = 0
    for size, block in zip(sizes, got, strict=True):
        content = block.split("\n[...")[0] if block.startswith("x") else ""
        assert len(content) <= MAX_ANSWER_CHARS
        kept += len(content)
        if len(content) < size:
            assert "cut" in block
        else:
            assert block == "x" * size
    assert kept == min(sum(min(size, MAX_ANSWER_CHARS) for size in sizes), MAX_ANSWERS_CHARS)


# --- compose: artifacts ---------------------------------------------------------------------


def artifact(
    id_: str, content: str | None, type_: str = "patch", is_answer: bool = False
) -> PassedArtifact:
    size = len(content.encode()) if content is not None else 7
    return PassedArtifact(id_, type_, size, content, is_answer)


def with_artifacts(task_id: str, output: str, *artifacts: PassedArtifact) -> Answer:
    return Answer(task_id, None, "completed", output, with_artifacts=True, artifacts=artifacts)


def test_artifacts_follow_their_answer_in_its_block() -> None:
    text = compose(
        "p",
        [
            with_artifacts(
                "t",
                "the answer",
                artifact("o", "the answer", "LLM_RESULT", is_answer=True),
                artifact("d", "+hello"),
                artifact("s3", None),
            )
        ],
    )
    [block] = blocks(text)
    assert block == (
        "the answer\n"
        '<artifact id="o" type="LLM_RESULT" bytes="10">\n(its content is the answer above)\n'
        "</artifact>\n"
        '<artifact id="d" type="patch" bytes="6">\n+hello\n</artifact>\n'
        '<artifact id="s3" type="patch" bytes="7">\n'
        "Not included (kept outside the database): GET /api/runtime/artifacts/s3/content\n"
        "</artifact>"
    )


def test_asked_but_none_is_said_and_not_asked_or_not_completed_shows_none() -> None:
    [asked] = blocks(compose("p", [with_artifacts("t", "a")]))
    assert asked == "a\n(it left no artifacts)"
    unasked = Answer("t", None, "completed", "a", artifacts=(artifact("d", "+x"),))
    assert blocks(compose("p", [unasked])) == ["a"]
    failed = Answer("t", None, "failed", None, "E", with_artifacts=True)
    assert "artifact" not in compose("p", [failed])


def test_artifacts_share_the_bounds_of_the_answers_and_their_cuts_say_where_the_whole_is() -> None:
    big = "p" * (MAX_ANSWER_CHARS + 1)  # as read: one past the bound
    answers = [
        with_artifacts(f"t{i}", "a" * MAX_ANSWER_CHARS, artifact(f"d{i}", big)) for i in range(2)
    ]
    answers.append(done("late", "L"))
    got = blocks(compose("p", answers))
    whole = "; the whole: GET /api/runtime/artifacts/d0/content]"
    assert "p" * MAX_ANSWER_CHARS + f"\n[... at least 1 more characters cut{whole}" in got[0]
    assert len(got[0]) < 2 * MAX_ANSWER_CHARS + 300
    assert "cut; the whole: GET /api/runtime/artifacts/d1/content]\n</artifact>" in got[1]
    assert got[2] == "[1 characters cut: limit reached]"  # 4 x 64 KiB used by the first two


# --- a workspace task's start ---------------------------------------------------------------


def ws(branch: str, repo: str = "demo", ref: str | None = None) -> dict[str, object]:
    return {"repo": repo, "branch": branch, "ref": ref}


def test_a_workspace_task_starts_from_the_one_other_branch_of_its_repository() -> None:
    mine = ws("d")
    deps = [("a", ws("a")), ("a2", ws("a")), ("own", ws("d")), ("o", ws("a", "other")), ("p", None)]
    assert other_branch_dependencies(mine, deps) == ["a", "a2"]
    assert other_branch_dependencies(None, deps) == []
    assert start_problem(mine, [("a", ws("a")), ("a2", ws("a")), ("o", ws("x", "other"))]) is None
    assert start_problem(None, [("a", ws("a")), ("b", ws("b"))]) is None
    assert start_problem(ws("d", ref="main"), [("own", ws("d"))]) is None


def test_two_branches_of_its_repository_or_a_ref_beside_one_are_refused() -> None:
    fan_in = start_problem(ws("d"), [("a", ws("a")), ("b", ws("b"))])
    assert fan_in is not None
    assert fan_in[0] == "depends_on"
    assert "write 2 branches (a, b): merging branches is not built" in fan_in[1]
    own_and_other = start_problem(ws("d"), [("own", ws("d")), ("a", ws("a"))])
    assert own_and_other is not None
    assert "(a, d)" in own_and_other[1]
    with_ref = start_problem(ws("d", ref="v1"), [("a", ws("a"))])
    assert with_ref is not None
    assert with_ref[0] == "workspace"
    assert "leave ref out" in with_ref[1]
