"""The prompt Claude receives: the task's prompt, with its `context_hints` resolved to files.

A hint is a path or a glob relative to the worker's project directory. The files it names are
given to Claude inline, each in a `<file path="…">` block, within size limits. A hint that names
no file (or that would leave the project directory) stays a plain-text hint, as in the seed.
"""

import glob
from dataclasses import dataclass, field
from pathlib import Path

MAX_FILE_BYTES = 64 * 1024
MAX_TOTAL_BYTES = 256 * 1024
MAX_FILES = 50


@dataclass(slots=True)
class Context:
    files: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def _matches(project: Path, hint: str) -> list[Path]:
    if Path(hint).is_absolute():
        return []
    pattern = str(project / hint)
    paths = glob.glob(pattern, recursive=True) if glob.has_magic(hint) else [pattern]
    inside = []
    for raw in sorted(paths):
        path = Path(raw).resolve()
        if path.is_file() and path.is_relative_to(project):
            inside.append(path)
    return inside


def resolve_hints(hints: list[str], project_dir: Path | None) -> Context:
    """Files for the hints that name some under `project_dir`; the rest as notes."""
    context = Context()
    project = project_dir.resolve() if project_dir else None
    total = 0
    for hint in hints:
        found = _matches(project, hint) if project else []
        if not found:
            context.notes.append(hint)
            continue
        for path in found:
            name = str(path.relative_to(project))  # type: ignore[arg-type]
            if name in context.files:
                continue
            size = path.stat().st_size
            if (
                size > MAX_FILE_BYTES
                or total + size > MAX_TOTAL_BYTES
                or len(context.files) >= MAX_FILES
            ):
                context.skipped.append(name)
                continue
            try:
                context.files[name] = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                context.skipped.append(name)
                continue
            total += size
    return context


def build_prompt(prompt: str, context: Context) -> str:
    """The text sent on the CLI's stdin."""
    parts = []
    if context.files:
        blocks = [f'<file path="{name}">\n{text}\n</file>' for name, text in context.files.items()]
        parts.append("Context files:\n" + "\n".join(blocks))
    if context.notes:
        parts.append("Context:\n" + "\n".join(f"- {note}" for note in context.notes))
    if context.skipped:
        parts.append("Not included (too large or unreadable): " + ", ".join(context.skipped))
    parts.append(prompt)
    return "\n\n".join(parts)
