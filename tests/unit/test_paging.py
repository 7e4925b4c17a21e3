"""Keyset cursors (their text form, and refusing anything else without raising), pages from
limit + 1 rows, and the dashboard history's windows of buckets."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloom.domain.errors import Invalid
from bloom.domain.history import (
    MAX_BUCKETS,
    Bucket,
    Window,
    failure_rate,
    minute_of,
)
from bloom.domain.ids import new_id
from bloom.domain.paging import MAX_AT, MAX_LIMIT, Cursor, Page, check_limit, page_of


def test_a_cursor_round_trips_through_its_text() -> None:
    cursor = Cursor(1_750_000_000_123, new_id(1_750_000_000_123))
    text = cursor.encode()
    assert text == f"1750000000123.{cursor.id}"
    assert Cursor.decode(text) == cursor
    assert Cursor.decode("0.a") == Cursor(0, "a")
    assert Cursor.decode(f"{MAX_AT}.x") == Cursor(MAX_AT, "x")


@given(at=st.integers(0, MAX_AT), id_=st.from_regex(r"[A-Za-z0-9_~.-]{1,128}", fullmatch=True))
def test_every_cursor_round_trips(at: int, id_: str) -> None:
    assert Cursor.decode(Cursor(at, id_).encode()) == Cursor(at, id_)


@pytest.mark.parametrize(
    "text",
    [
        "",
        ".",
        "123",
        "123.",
        ".abc",
        "abc.def",
        "-1.abc",
        "+1.abc",
        "01.abc",
        "1e3.abc",
        " 1.abc",
        "1.abc ",
        "1.a b",
        "1.a/b",
        "1.a%2Fb",
        "1.é",
        "1.\x00",
        "1.abc\n",
        f"{MAX_AT + 1}.abc",
        "99999999999999999999.abc",
        "1." + "a" * 129,
        "١٢.abc",  # Arabic-Indic digits are digits to int(), not to a cursor
    ],
)
def test_a_malformed_cursor_decodes_to_none(text: str) -> None:
    assert Cursor.decode(text) is None


@given(st.text())
def test_decoding_never_raises(text: str) -> None:
    decoded = Cursor.decode(text)
    assert decoded is None or decoded.encode() == text


def position(n: int) -> Cursor:
    return Cursor(n, str(n))


def test_a_page_from_limit_plus_one_rows() -> None:
    assert page_of([9, 8, 7, 6], 3, position) == Page([9, 8, 7], Cursor(7, "7"))
    assert page_of([9, 8, 7], 3, position) == Page([9, 8, 7], None)
    assert page_of([9], 3, position) == Page([9], None)
    assert page_of([], 3, position) == Page([], None)


def test_a_page_holds_1_to_max_limit_rows() -> None:
    check_limit(1)
    check_limit(MAX_LIMIT)
    for limit in (0, -5, MAX_LIMIT + 1):
        with pytest.raises(Invalid):
            check_limit(limit)


T0 = 1_800_000_000_000  # a whole hour


def test_a_window_ends_with_the_bucket_holding_now() -> None:
    window = Window.ending_at(T0 + 150_000, window_ms=300_000, bucket_ms=60_000)
    assert (window.first, window.buckets, window.end) == (T0 - 120_000, 5, T0 + 180_000)
    on_edge = Window.ending_at(T0, window_ms=300_000, bucket_ms=60_000)
    assert (on_edge.first, on_edge.end) == (T0 - 240_000, T0 + 60_000)
    uneven = Window.ending_at(T0, window_ms=90_000, bucket_ms=60_000)
    assert (uneven.first, uneven.buckets) == (T0 - 60_000, 2)
    day = Window.ending_at(T0 + 1, window_ms=86_400_000, bucket_ms=900_000)
    assert (day.first, day.buckets) == (T0 - 95 * 900_000, 96)


def test_a_window_fills_every_bucket_in_order() -> None:
    window = Window.ending_at(T0 + 150_000, window_ms=300_000, bucket_ms=60_000)
    assert window.fill([(1, 3, 0), (4, 0, 2)]) == [
        Bucket(T0 - 120_000, 0, 0),
        Bucket(T0 - 60_000, 3, 0),
        Bucket(T0, 0, 0),
        Bucket(T0 + 60_000, 0, 0),
        Bucket(T0 + 120_000, 0, 2),
    ]


@pytest.mark.parametrize(
    ("window_ms", "bucket_ms"),
    [(0, 1), (1, 0), (-60_000, 60_000), (60_000, -1), (60_000, 120_000)],
)
def test_a_window_needs_positive_sizes_and_a_bucket_inside_it(
    window_ms: int, bucket_ms: int
) -> None:
    with pytest.raises(Invalid):
        Window.ending_at(T0, window_ms=window_ms, bucket_ms=bucket_ms)


def test_a_window_holds_at_most_max_buckets() -> None:
    assert Window.ending_at(T0, window_ms=MAX_BUCKETS, bucket_ms=1).buckets == MAX_BUCKETS
    with pytest.raises(Invalid):
        Window.ending_at(T0, window_ms=MAX_BUCKETS + 1, bucket_ms=1)


def test_failure_rate_and_minutes() -> None:
    assert failure_rate([]) is None
    assert failure_rate([Bucket(0, 0, 0)]) is None
    assert failure_rate([Bucket(0, 3, 1), Bucket(1, 0, 0), Bucket(2, 0, 4)]) == 5 / 8
    assert minute_of(T0 + 59_999) == T0
    assert minute_of(T0 + 60_000) == T0 + 60_000
