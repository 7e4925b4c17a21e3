"""Budgets per project, the pure rules: UTC windows and their resets, when a project is held,
and which marks a charge passes."""

from datetime import UTC, datetime

from bloom.clients.wire import TaskInfo
from bloom.domain.budget import (
    Budget,
    Crossing,
    Spend,
    Window,
    crossings,
    held_until,
    next_month,
    reset_of,
    start_of_month,
)
from bloom.mcp.fleet import task_view


def ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    return int(datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp() * 1000)


def budget(daily: float | None, monthly: float | None) -> Budget:
    return Budget("p", daily, monthly, None, 0, "admin")


def test_windows_are_utc_days_and_months() -> None:
    now = ms(2026, 12, 31, 23, 59)
    assert start_of_month(now) == ms(2026, 12, 1)
    assert next_month(now) == ms(2027, 1, 1)
    assert reset_of(Window.DAILY, now) == ms(2027, 1, 1)
    assert reset_of(Window.MONTHLY, ms(2026, 2, 10)) == ms(2026, 3, 1)


def test_a_project_is_held_until_the_latest_reset_of_what_it_spent() -> None:
    now = ms(2026, 11, 10, 12)
    assert held_until(budget(5, 100), Spend(4.99, 50), now) is None
    assert held_until(budget(5, 100), Spend(5, 50), now) == ms(2026, 11, 11)
    assert held_until(budget(5, 100), Spend(5, 100), now) == ms(2026, 12, 1)
    assert held_until(budget(None, 100), Spend(500, 99), now) is None
    assert held_until(budget(0, None), Spend(0, 0), now) == ms(2026, 11, 11)  # a stop switch
    held = Budget("p", 1, None, ms(2026, 11, 11), 0, "a")
    assert held.hold_at(now) == ms(2026, 11, 11)
    assert held.hold_at(ms(2026, 11, 11)) is None


def test_each_mark_is_passed_once_by_the_charge_that_crosses_it() -> None:
    daily = budget(10, None)
    assert crossings(daily, Spend(7, 7), Spend(7.9, 7.9)) == []
    assert crossings(daily, Spend(7.9, 7.9), Spend(8, 8)) == [Crossing(Window.DAILY, False, 8, 10)]
    assert crossings(daily, Spend(8, 8), Spend(9, 9)) == []
    assert crossings(daily, Spend(9, 9), Spend(12, 12)) == [Crossing(Window.DAILY, True, 12, 10)]
    assert crossings(daily, Spend(12, 12), Spend(13, 13)) == []
    both = budget(10, 11)
    assert crossings(both, Spend(7, 8), Spend(10, 11)) == [
        Crossing(Window.DAILY, True, 10, 10),
        Crossing(Window.MONTHLY, True, 11, 11),
    ]
    assert crossings(budget(0, None), Spend(0, 0), Spend(1, 1)) == []  # 0 holds from the start


def test_a_model_sees_why_a_task_waits() -> None:
    raw = {
        "id": "t1",
        "context_id": "c",
        "agent_slug": "p",
        "prompt": "x",
        "context_hints": [],
        "policy": {"timeout_sec": 60, "budget": 0},
        "desired_format": "text",
        "status": "queued",
        "created_at": 1,
        "updated_at": 1,
        "lease_id": None,
        "worker_id": None,
        "attempts": 0,
        "max_attempts": 3,
    }
    assert "waiting" not in task_view(TaskInfo.from_json(raw))
    hold = {"project": "p", "until": ms(2026, 11, 11), "reason": "budget_exhausted"}
    view = task_view(TaskInfo.from_json(raw | {"hold": hold}))
    assert view["waiting"] == "project p has spent its budget; queued until 2026-11-11 00:00 UTC"
