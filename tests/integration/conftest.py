"""Fixtures of the integration tier beside the suite's own (tests/conftest.py)."""

from tests.support.sent import Sent
from tests.support.sent import sent as sent  # the fixture, for every test here

__all__ = ["Sent", "sent"]
