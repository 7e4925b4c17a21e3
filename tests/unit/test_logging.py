"""What the servers' logging lets through."""

import logging
from collections.abc import Iterator

import pytest

from bloom.cli.logs import configure_logging


@pytest.fixture
def restored_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level
    logging.getLogger("httpx").setLevel(logging.NOTSET)


@pytest.mark.usefixtures("restored_logging")
@pytest.mark.parametrize(("level", "shown"), [("info", False), ("debug", True)])
def test_outgoing_requests_are_logged_only_at_debug(
    capsys: pytest.CaptureFixture[str], level: str, shown: bool
) -> None:
    configure_logging(level, "json")
    logging.getLogger("httpx").info("HTTP Request: GET http://127.0.0.1:8000/agents")
    logging.getLogger("httpx").warning("a warning")
    logging.getLogger("bloom.access").info("request")
    err = capsys.readouterr().err
    assert ("HTTP Request" in err) is shown
    assert "a warning" in err
    assert '"event": "request"' in err
