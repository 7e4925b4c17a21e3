"""A workspace task's patch read for the task page: its files with their counts and their lines,
each marked for its color, a large file or change collapsed (pure)."""

import re
from dataclasses import dataclass, field
from typing import Any

MAX_SHOWN_LINES = 2000
"""Beyond this many diff lines in all, the rest is left to the download."""
COLLAPSED_LINES = 200
"""A file's diff longer than this starts collapsed."""
COMMIT_HEADER = re.compile(r"From [0-9a-f]{40,64} ")


@dataclass(slots=True)
class FileDiff:
    path: str
    added: int = 0
    removed: int = 0
    binary: bool = False
    lines: list[tuple[str, str]] = field(default_factory=list)
    """(kind, text): kind `add`, `del`, `hunk` or `ctx`."""

    @property
    def collapsed(self) -> bool:
        return len(self.lines) > COLLAPSED_LINES


@dataclass(frozen=True, slots=True)
class Change:
    """What the page shows of an attempt's change."""

    workspace: dict[str, Any]
    files: list[FileDiff]
    truncated: bool
    patch_artifact_id: str | None


def parse_patch(patch: str, limit: int = MAX_SHOWN_LINES) -> tuple[list[FileDiff], bool]:
    """The files of a `git format-patch` text (several commits: each file once per commit), and
    whether lines were left out past `limit`."""
    files: list[FileDiff] = []
    current: FileDiff | None = None
    shown = 0
    truncated = False
    for line in patch.splitlines():
        if COMMIT_HEADER.match(line):  # the next commit's message and stat: no file's lines
            current = None
            continue
        if line.startswith("diff --git "):
            current = FileDiff(_path_of(line))
            files.append(current)
            continue
        if current is None or line.startswith(("index ", "--- ", "+++ ", "similarity ")):
            continue
        if line.startswith("Binary files ") or line == "GIT binary patch":
            current.binary = True
            continue
        if current.binary or line == "-- ":  # the signature that ends format-patch's text
            continue
        kind = _kind(line)
        if kind is None:
            continue
        if kind == "add":
            current.added += 1
        elif kind == "del":
            current.removed += 1
        if shown < limit:
            current.lines.append((kind, line))
            shown += 1
        else:
            truncated = True
    return files, truncated


def _kind(line: str) -> str | None:
    if line.startswith("@@"):
        return "hunk"
    if line.startswith("+"):
        return "add"
    if line.startswith("-"):
        return "del"
    if line.startswith(" "):
        return "ctx"
    return None


def _path_of(header: str) -> str:
    """`diff --git a/x b/x` → `x` (the new path)."""
    _, _, rest = header.partition(" b/")
    return rest or header[len("diff --git ") :]


def change_of(results: list[Any], patch: str | None) -> Change | None:
    """The newest successful attempt's change (None: no workspace result)."""
    done = [r for r in results if r.workspace and r.status.value == "success"]
    if not done:
        return None
    workspace = done[-1].workspace
    files, truncated = parse_patch(patch) if patch else ([], False)
    return Change(workspace, files, truncated, workspace.get("patch_artifact_id"))
