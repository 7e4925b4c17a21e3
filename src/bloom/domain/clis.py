"""The agent CLIs a task may name (`cli`), and the one it gets when it names none."""

CLIS = ("claude", "codex", "gemini")
DEFAULT_CLI = "claude"
"""What a task without `cli` runs, and what a worker that reports no `clis` is taken to have."""

OTHER_CLI = "other"


def cli_label(cli: str) -> str:
    """An agent CLI's name as a metric's label value: one of `CLIS`, else `other` (a label's
    values stay bounded whatever a task or a worker says)."""
    return cli if cli in CLIS else OTHER_CLI
