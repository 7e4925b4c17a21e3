"""Usage figures read from a result's metrics, and the instants a usage window is given in."""

import pytest

from bloom.domain.errors import Invalid
from bloom.domain.usage import Usage, bucket_key, parse_instant, start_of_day
from bloom.runtime.services.metrics import BoundedLabels


def test_usage_takes_only_figures_of_the_right_type() -> None:
    assert Usage.from_metrics({}) == Usage()
    full = {
        "cost_usd": 1,
        "input_tokens": 2,
        "output_tokens": 3,
        "tokens_used": 5,
        "num_turns": 1,
        "duration_ms": 9,
        "model": "m" * 300,
    }
    assert Usage.from_metrics(full) == Usage(1.0, 2, 3, 5, 1, 9, "m" * 128)
    wrong = {
        "cost_usd": True,
        "input_tokens": 2.5,
        "num_turns": "1",
        "model": "",
        "tokens_used": None,
    }
    assert Usage.from_metrics(wrong) == Usage()


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("0", 0),
        ("1764115200000", 1_764_115_200_000),
        ("2025-11-26", 1_764_115_200_000),
        ("2025-11-26T01:00:00Z", 1_764_118_800_000),
        ("2025-11-26T03:00:00+02:00", 1_764_118_800_000),
    ],
)
def test_an_instant_is_epoch_ms_or_iso_8601_in_utc_by_default(text: str, ms: int) -> None:
    assert parse_instant(text, "from") == ms


@pytest.mark.parametrize("text", ["", "yesterday", "-5", "²", "1e9", "9" * 30, "1969-12-31"])
def test_anything_else_is_invalid_naming_the_parameter(text: str) -> None:
    with pytest.raises(Invalid, match=r"^to must be"):
        parse_instant(text, "to")


def test_days_and_buckets_are_utc() -> None:
    assert start_of_day(1_764_118_800_000) == 1_764_115_200_000
    assert bucket_key(1_764_118_800_000) == "2025-11-26T01:00:00Z"


def test_project_labels_are_bounded() -> None:
    label = BoundedLabels(2, "other")
    assert [label(p) for p in ("a", "b", "c", "a", "d", "b")] == [
        "a",
        "b",
        "other",
        "a",
        "other",
        "b",
    ]


def test_costs_read_as_cents_and_fractions_of_a_cent_below_a_dime() -> None:
    from bloom.runtime.dashboard.present import usd

    assert [usd(x) for x in (None, 0, 0.0031, 0.0999, 0.1, 0.73, 1234.5)] == [
        "—", "$0.00", "$0.0031", "$0.0999", "$0.10", "$0.73", "$1,234.50",
    ]  # fmt: skip
