"""Parts a test needs that a laptop may lack (PostgreSQL, the Claude CLI): skipped there with
the reason, a failure in CI (`CI=true`), never a silent skip."""

import os
from typing import NoReturn

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def unavailable(reason: str) -> NoReturn:
    """Skip on a laptop that lacks a part; in CI a missing part is a failure, never a skip."""
    if IN_CI:
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)
