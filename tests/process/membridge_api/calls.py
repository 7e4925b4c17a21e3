"""Small helpers for calling the shared Membridge server: names of one's own, checked answers."""

import uuid
from typing import Any

import httpx


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()
