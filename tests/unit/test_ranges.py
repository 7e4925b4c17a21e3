"""Byte ranges (RFC 9110 §14) of content of a known size."""

import pytest

from bloom.web.ranges import ByteRange, RangeNotSatisfiable, parse_range


@pytest.mark.parametrize(
    ("header", "size", "expected"),
    [
        (None, 10, None),
        ("bytes=0-0", 10, ByteRange(0, 0)),
        ("bytes=2-5", 10, ByteRange(2, 5)),
        ("bytes=2-", 10, ByteRange(2, 9)),
        ("bytes=8-100", 10, ByteRange(8, 9)),
        ("bytes=-3", 10, ByteRange(7, 9)),
        ("bytes=-30", 10, ByteRange(0, 9)),
        ("BYTES = 1-2", 10, ByteRange(1, 2)),
        ("bytes=0-1,4-5", 10, None),  # several ranges: the whole content
        ("items=0-1", 10, None),
        ("bytes=5-2", 10, None),
        ("bytes=a-b", 10, None),
        ("bytes=-", 10, None),
        ("bytes=1-x", 10, None),
    ],
)
def test_ranges(header: str | None, size: int, expected: ByteRange | None) -> None:
    assert parse_range(header, size) == expected


@pytest.mark.parametrize(("header", "size"), [("bytes=10-", 10), ("bytes=-0", 10), ("bytes=-5", 0)])
def test_unsatisfiable(header: str, size: int) -> None:
    with pytest.raises(RangeNotSatisfiable):
        parse_range(header, size)


def test_content_range() -> None:
    assert ByteRange(2, 5).content_range(10) == "bytes 2-5/10"
    assert ByteRange(2, 5).length == 4
