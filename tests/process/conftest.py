"""What the process tests share: the whole system as real processes."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.stack import Stack


@pytest.fixture
def stack(database_url: str, tmp_path: Path, claude: Path) -> Iterator[Stack]:
    """Echo model, Membridge and the runtime (no workers yet) on a fresh database."""
    built = Stack(database_url, tmp_path, claude)
    try:
        built.start()
        yield built
    finally:
        built.close()
