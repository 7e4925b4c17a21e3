"""BLOOM Runtime: queue LLM tasks, lease them to Claude CLI workers, keep every result."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("bloom-runtime")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"
