"""Task graphs, pure: a batch's dependencies checked (refs, cycles, bounds) and the answers of a
task's dependencies put before its prompt (docs/graphs.md).

The bounds mirror the worker's `context_hints` files (`worker/prompt.py`): so much per item, so
much in all, and what is cut is said in the text, never silently dropped."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from bloom.domain.states import UNSUCCESSFUL, TaskStatus

MAX_DEPENDENCIES = 1_000
"""The most tasks one task may depend on."""
MAX_BATCH_DEPENDENCIES = 50_000
"""The most dependencies the tasks of one batch name together (1,000 tasks with 50 each, or 50
fan-ins of 1,000): a batch is one transaction, and 50,000 edges take it about 2 s."""
MAX_ANSWER_CHARS = 64 * 1024
"""Of each dependency's answer, at most this much is passed on (the rest is cut, and said)."""
MAX_ANSWERS_CHARS = 256 * 1024
"""Of all of a task's dependencies' answers together, at most this much."""
MAX_REF_CHARS = 100


class OnDependencyFailure(StrEnum):
    CANCEL = "cancel"
    """A dependency that ends failed, dead or cancelled cancels the task (the default)."""
    RUN = "run"
    """The task runs anyway once every dependency has ended, told which ones failed."""


class GraphProblem(Exception):
    """A batch's dependencies cannot be taken: `field` names where (`tasks.3.depends_on`)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class Planned:
    """One task of a batch as its dependencies name it: its `ref` (or None) and the names it
    waits for (refs of the same batch, or ids of tasks that exist)."""

    ref: str | None
    depends_on: Sequence[str]
    with_artifacts: Sequence[str] = ()
    """Of `depends_on`, those whose artifacts it asks for too (`dependency_artifacts`)."""


@dataclass(frozen=True, slots=True)
class Edges:
    """A batch's dependencies resolved: for each task (by its index), the indexes of the batch
    tasks it waits for, and the existing task ids it waits for, each in the order named."""

    in_batch: list[list[int]]
    existing: list[list[str]]

    def existing_ids(self) -> set[str]:
        return {task_id for ids in self.existing for task_id in ids}

    def order(self) -> list[int]:
        """The batch's indexes, each after the batch tasks it depends on (there is no cycle),
        otherwise in the batch's order."""
        order: list[int] = []
        placed: set[int] = set()
        for index in range(len(self.in_batch)):
            stack = [(index, iter(self.in_batch[index]))]
            while stack:
                node, children = stack[-1]
                child = next((c for c in children if c not in placed), None)
                if child is None:
                    stack.pop()
                    if node not in placed:
                        placed.add(node)
                        order.append(node)
                else:
                    stack.append((child, iter(self.in_batch[child])))
        return order


@dataclass(frozen=True, slots=True)
class Start:
    """How a new task starts, from its dependencies' states: its status, its edges (id, ref,
    settled, with artifacts), how many it waits on, and (cancelled) what for and why."""

    status: TaskStatus
    edges: list[tuple[str, str | None, bool, bool]]
    waiting_on: int
    cancelled_for: str | None = None
    reason: str | None = None


def start_of(
    on_failure: OnDependencyFailure,
    named: Sequence[tuple[str, str | None, bool]],
    ends: Mapping[str, tuple[TaskStatus, str | None]],
) -> Start:
    """A new task's start: `named`, its dependencies as (id, ref, with artifacts); `ends`, each
    one's status and, if it was cancelled for another's failure, that one (the root). Queued
    when every dependency is settled (completed; or ended at all, when it runs anyway), else
    blocked; cancelled, for the root, when one ended unsuccessfully and it does not run
    anyway."""
    runs_anyway = on_failure is OnDependencyFailure.RUN
    edges: list[tuple[str, str | None, bool, bool]] = []
    cancelled_for: str | None = None
    reason: str | None = None
    for task_id, ref, with_artifacts in named:
        status, root = ends[task_id]
        settled = status is TaskStatus.COMPLETED or (runs_anyway and status in UNSUCCESSFUL)
        edges.append((task_id, ref, settled, with_artifacts))
        if cancelled_for is None and not runs_anyway and status in UNSUCCESSFUL:
            cancelled_for = root or task_id
            reason = f"Dependency {task_id} ended {status}"
    waiting_on = sum(not settled for _, _, settled, _ in edges)
    if cancelled_for is not None:
        return Start(TaskStatus.CANCELLED, edges, waiting_on, cancelled_for, reason)
    status = TaskStatus.BLOCKED if waiting_on else TaskStatus.QUEUED
    return Start(status, edges, waiting_on)


def plan(tasks: Sequence[Planned], *, field_of: str = "tasks.{index}.") -> Edges:
    """Each task's dependencies resolved against the batch's refs: a name that is a ref of the
    batch is that task, any other name an existing task's id (checked by the caller).

    Refused (GraphProblem, the field named): a ref used twice, a task naming itself, the same
    name twice, more than `MAX_DEPENDENCIES`, or a cycle among the batch's tasks."""
    refs: dict[str, int] = {}
    for index, task in enumerate(tasks):
        if task.ref is None:
            continue
        if task.ref in refs:
            raise GraphProblem(
                field_of.format(index=index) + "ref",
                f'ref "{task.ref}" is used twice in the batch (tasks {refs[task.ref]} and {index})',
            )
        refs[task.ref] = index
    total = sum(len(task.depends_on) for task in tasks)
    if total > MAX_BATCH_DEPENDENCIES:
        raise GraphProblem(
            field_of.format(index="").rstrip(".") or "depends_on",
            f"{total} dependencies in the batch: at most {MAX_BATCH_DEPENDENCIES} are allowed",
        )
    in_batch: list[list[int]] = []
    existing: list[list[str]] = []
    for index, task in enumerate(tasks):
        where = field_of.format(index=index) + "depends_on"
        if len(task.depends_on) > MAX_DEPENDENCIES:
            raise GraphProblem(
                where,
                f"{len(task.depends_on)} dependencies: at most {MAX_DEPENDENCIES} are allowed",
            )
        seen: set[str] = set()
        mine: list[int] = []
        theirs: list[str] = []
        for name in task.depends_on:
            if name in seen:
                raise GraphProblem(where, f'"{name}" is named twice')
            seen.add(name)
            if name in refs:
                if refs[name] == index:
                    raise GraphProblem(where, f'a task cannot depend on itself ("{name}")')
                mine.append(refs[name])
            else:
                theirs.append(name)
        in_batch.append(mine)
        existing.append(theirs)
        _check_artifacts(task, field_of.format(index=index) + "dependency_artifacts")
    cycle = _cycle(in_batch)
    if cycle is not None:
        names = " -> ".join(tasks[i].ref or str(i) for i in [*cycle, cycle[0]])
        raise GraphProblem(
            field_of.format(index=cycle[0]) + "depends_on", f"dependency cycle: {names}"
        )
    return Edges(in_batch, existing)


def _check_artifacts(task: Planned, where: str) -> None:
    """`dependency_artifacts` names tasks of its `depends_on`, each once."""
    named = set(task.depends_on)
    seen: set[str] = set()
    for name in task.with_artifacts:
        if name not in named:
            raise GraphProblem(where, f'"{name}" is not named in depends_on')
        if name in seen:
            raise GraphProblem(where, f'"{name}" is named twice')
        seen.add(name)


def _cycle(edges: list[list[int]]) -> list[int] | None:
    """A cycle of the graph (task -> the tasks it waits for), as its tasks in order, or None."""
    state = [0] * len(edges)  # 0 unseen, 1 on the path, 2 done
    for start in range(len(edges)):
        if state[start]:
            continue
        path: list[int] = []
        stack: list[tuple[int, int]] = [(start, 0)]
        while stack:
            node, next_child = stack.pop()
            if next_child == 0:
                state[node] = 1
                path.append(node)
            if next_child < len(edges[node]):
                stack.append((node, next_child + 1))
                child = edges[node][next_child]
                if state[child] == 1:
                    return path[path.index(child) :]
                if state[child] == 0:
                    stack.append((child, 0))
            else:
                state[node] = 2
                path.pop()
    return None


ARTIFACT_CONTENT_PATH = "/api/runtime/artifacts/{id}/content"
"""Where the whole of an artifact passed on by reference (or cut) is read (a reader's key)."""


@dataclass(frozen=True, slots=True)
class PassedArtifact:
    """One artifact of a dependency's answer, as its dependent is given it: what it is, and the
    first characters of its content (None: kept outside the database, so passed by reference;
    the grant never waits on an external store)."""

    id: str
    type: str
    size_bytes: int | None
    content: str | None
    is_answer: bool = False
    """The artifact that holds the answer's output itself: not repeated."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What one dependency left for its dependent: its id, its ref in the batch that made them
    (or None), how it ended, and its answer (the output of its success) or its last error;
    with its success's artifacts when the dependent asked for them."""

    task_id: str
    ref: str | None
    status: str
    output: str | None
    error: str | None = None
    read_short: bool = False
    """Only the output's first characters were read (`MAX_ANSWER_CHARS` + 1): it is longer
    still, by an amount not known here."""
    with_artifacts: bool = False
    """The dependent asked for this dependency's artifacts (`dependency_artifacts`)."""
    artifacts: Sequence[PassedArtifact] = ()


def _cut(text: str, limit: int, longer: bool = False, whole: str = "") -> str:
    if len(text) <= limit:
        return text
    more = len(text) - limit
    return text[:limit] + (
        f"\n[... at least {more} more characters cut{whole}]"
        if longer
        else f"\n[... {more} more characters cut{whole}]"
    )


def _attribute(value: str) -> str:
    return value.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


class _Budget:
    """What is left of `MAX_ANSWERS_CHARS`: each text passed on at most `MAX_ANSWER_CHARS`, all
    of them together at most the whole; what is cut is said."""

    def __init__(self) -> None:
        self.left = MAX_ANSWERS_CHARS

    def take(self, body: str, longer: bool, whole: str = "") -> str:
        limit = min(MAX_ANSWER_CHARS, self.left)
        self.left -= min(len(body), limit)
        if limit > 0:
            return _cut(body, limit, longer, whole)
        return f"[{'at least ' if longer else ''}{len(body)} characters cut: limit reached{whole}]"


def _artifact_block(artifact: PassedArtifact, budget: _Budget) -> str:
    attrs = f'id="{_attribute(artifact.id)}" type="{_attribute(artifact.type)}"'
    if artifact.size_bytes is not None:
        attrs += f' bytes="{artifact.size_bytes}"'
    path = ARTIFACT_CONTENT_PATH.format(id=artifact.id)
    if artifact.is_answer:
        body = "(its content is the answer above)"
    elif artifact.content is None:
        body = f"Not included (kept outside the database): GET {path}"
    else:
        longer = len(artifact.content) > MAX_ANSWER_CHARS
        body = budget.take(artifact.content, longer, f"; the whole: GET {path}")
    return f"<artifact {attrs}>\n{body}\n</artifact>"


def compose(prompt: str, answers: Sequence[Answer]) -> str:
    """The prompt a dependent task runs with: a `<dependency>` block per dependency, in the
    order it named them, naming the task (and its ref) and how it ended, holding its answer
    and, when asked, an `<artifact>` block per artifact of its success (each text at most
    `MAX_ANSWER_CHARS`, `MAX_ANSWERS_CHARS` in all: the rest cut, and said), then the task's
    own prompt. No dependencies: the prompt as it is."""
    if not answers:
        return prompt
    blocks: list[str] = []
    budget = _Budget()
    for answer in answers:
        attrs = f'task="{_attribute(answer.task_id)}"'
        if answer.ref:
            attrs += f' ref="{_attribute(answer.ref)}"'
        attrs += f' status="{_attribute(answer.status)}"'
        if answer.status == "completed":
            body = answer.output or ""
        else:
            body = f"This dependency did not complete ({answer.status})" + (
                f": {answer.error}" if answer.error else "."
            )
        parts = [budget.take(body, answer.read_short and answer.status == "completed")]
        if answer.with_artifacts and answer.status == "completed":
            parts += [_artifact_block(artifact, budget) for artifact in answer.artifacts]
            if not answer.artifacts:
                parts.append("(it left no artifacts)")
        inner = "\n".join(parts)
        blocks.append(f"<dependency {attrs}>\n{inner}\n</dependency>")
    return "\n\n".join(
        [
            "The tasks this task depends on have ended; their answers:",
            *blocks,
            prompt,
        ]
    )
