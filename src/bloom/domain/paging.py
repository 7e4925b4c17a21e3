"""Keyset paging: a listing's position as a cursor, and one page of it.

A listing is ordered newest first by (a timestamp, an id); a cursor names the last row a page
showed, and the next page holds the rows strictly older than it. No OFFSET: the cost of a page
does not grow with how deep it is, and rows written meanwhile neither repeat nor vanish.
"""

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from bloom.domain.errors import Invalid

T = TypeVar("T")

MAX_LIMIT = 500
"""The most rows one page may hold."""

MAX_AT = 2**63 - 1
"""Timestamps are BIGINT epoch ms: a cursor beyond them is malformed."""
_CURSOR = re.compile(r"(0|[1-9][0-9]{0,18})\.([A-Za-z0-9_~.-]{1,128})")


@dataclass(frozen=True, slots=True)
class Cursor:
    """A keyset position: the rows strictly older than (at, id) come next."""

    at: int
    """Epoch ms: a task's created_at, an audit entry's timestamp."""
    id: str

    def encode(self) -> str:
        """URL-safe text (ids are UUIDs): `<at>.<id>`."""
        return f"{self.at}.{self.id}"

    @classmethod
    def decode(cls, text: str) -> "Cursor | None":
        """The cursor `encode` wrote, or None for anything else (never raises)."""
        match = _CURSOR.fullmatch(text)
        if match is None:
            return None
        at = int(match.group(1))
        return cls(at, match.group(2)) if at <= MAX_AT else None


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    next: Cursor | None
    """Where the next page starts; None when this is the last page."""


def page_of(rows: Sequence[T], limit: int, position: Callable[[T], Cursor]) -> Page[T]:
    """The page from up to `limit` + 1 rows read in order: the extra row, when there is one, only
    says that another page follows (it starts after the last row shown)."""
    items = list(rows[:limit])
    more = len(rows) > limit and bool(items)
    return Page(items, position(items[-1]) if more else None)


def check_limit(limit: int) -> None:
    """A page's size: 1 to `MAX_LIMIT` rows, else Invalid."""
    if not 1 <= limit <= MAX_LIMIT:
        raise Invalid(f"limit must be between 1 and {MAX_LIMIT}")
