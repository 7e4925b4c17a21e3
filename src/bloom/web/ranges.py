"""HTTP byte ranges (RFC 9110 §14): one range of a representation of known size.

A request for several ranges, or a header that does not parse, is ignored (the whole content is
sent, as the RFC allows); a range wholly past the end is unsatisfiable (416).
"""

from dataclasses import dataclass


class RangeNotSatisfiable(Exception):
    """The range starts at or beyond the end of the content."""


@dataclass(frozen=True, slots=True)
class ByteRange:
    first: int
    last: int  # inclusive

    @property
    def length(self) -> int:
        return self.last - self.first + 1

    def content_range(self, size: int) -> str:
        return f"bytes {self.first}-{self.last}/{size}"


def parse_range(header: str | None, size: int) -> ByteRange | None:
    """The single byte range `header` asks of `size` bytes; `None`: send everything."""
    if not header:
        return None
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    start, dash, end = spec.strip().partition("-")
    if not dash or not (start.isdigit() or end.isdigit()):
        return None
    if not start:  # a suffix: the last `end` bytes
        if int(end) == 0 or size == 0:
            raise RangeNotSatisfiable(header)
        return ByteRange(max(size - int(end), 0), size - 1)
    if not start.isdigit() or (end and not end.isdigit()):
        return None
    first, last = int(start), int(end) if end else size - 1
    if first >= size:
        raise RangeNotSatisfiable(header)
    if last < first:
        return None
    return ByteRange(first, min(last, size - 1))
