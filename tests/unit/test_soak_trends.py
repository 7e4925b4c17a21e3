"""Soak mode's verdict: the settled run against its end, dead rows as a share."""

from bloom.bench.soak import Sample, SoakOptions, SoakReport, trend
from bloom.runtime.storage.vitals import DatabaseVitals, TableVitals


def _sample(at: float, rss_kb: int, dead: int, live: int) -> Sample:
    table = TableVitals("workers", live, live * 100, dead, 0)
    return Sample(at, 0, 0, rss_kb, 20, DatabaseVitals(5, 1000, None, [table]))


def test_trend_compares_the_settled_run_with_its_end():
    """Ten samples: the median of the 3rd and 4th against the median of the last two; a start-up
    climb does not count, growth at the end does."""
    steady = trend("x", [10, 50, 100, 100, 100, 100, 100, 100, 100, 100])
    assert (steady.settled, steady.end, steady.peak, steady.change) == (100, 100, 100, 0)
    leak = trend("x", [10, 50, 100, 100, 110, 120, 130, 140, 150, 160])
    assert (leak.settled, leak.end, leak.change, leak.change_ratio) == (100, 155, 55, 0.55)
    assert trend("x", [7]).settled == trend("x", [7]).end == 7


def test_report_trends_give_dead_rows_as_a_share():
    """A table's dead rows are judged as a share of its rows, its size per live row once it has
    enough rows; memory in MiB; connections where the database counts them."""
    options = SoakOptions(duration=1, rate=1)
    samples = [_sample(i, 102_400, dead=i * 10, live=200) for i in range(10)]
    report = SoakReport(options, "postgresql", samples)
    by_figure = {t.figure: t for t in report.trends()}
    assert by_figure["server RSS (MiB)"].end == 100
    assert by_figure["database connections"].end == 5
    assert by_figure["workers: bytes per live row"].end == 100
    dead = by_figure["workers: dead rows (%)"]
    assert dead.peak == round(100 * 90 / 290, 1)
