"""The agent CLIs a task may name (`cli`), and the one it gets when it names none."""

CLIS = ("claude", "codex", "gemini")
DEFAULT_CLI = "claude"
"""What a task without `cli` runs, and what a worker that reports no `clis` is taken to have."""
