"""BLOOM Runtime: queue LLM tasks, lease them to Claude CLI workers, keep every result."""

__version__ = "0.1.0"
"""The package's version, as pyproject.toml states it (a test holds them equal). Written here
rather than read from the installed metadata, which costs every `bloom` command 0.1 s."""
