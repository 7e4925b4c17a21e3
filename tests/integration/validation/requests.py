"""The valid base request of every route, and how a refusal names its field."""

from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class World:
    """A worker w1 (two slots), a queued task and a task leased to w1."""

    queued: dict[str, Any]
    leased: dict[str, Any]
    lease: dict[str, Any]


def assert_field_error(response: httpx.Response, field: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["formErrors"] == []
    assert list(error["fieldErrors"]) == [field]
    messages = error["fieldErrors"][field]
    assert messages
    assert all(isinstance(m, str) and m for m in messages)
