"""Which worktrees the workspace collector removes (pure: times, sizes and free space given)."""

from pathlib import Path

from bloom.worker.workspace_gc import IN_USE_SEC, Tree, to_remove

NOW = 1_000_000.0
HOUR = 3600.0
GIB = 1024**3


def tree(name: str, hours_ago: float) -> Tree:
    path = Path("/w/trees/demo") / name
    return Tree(
        path, Path("/w/mirrors/demo.git"), Path("/w/used/demo") / name, NOW - hours_ago * HOUR
    )


def chosen(found: list[Tree], free: int, sizes: dict[str, int] | None = None) -> list[str]:
    return [
        t.path.name
        for t in to_remove(
            found,
            NOW,
            retention_sec=24 * HOUR,
            free_bytes=free,
            min_free_bytes=GIB,
            size_of=lambda path: (sizes or {}).get(path.name, 0),
        )
    ]


def test_only_those_past_the_retention_while_space_is_plenty() -> None:
    found = [tree("old", 30), tree("day", 23), tree("fresh", 0.1)]
    assert chosen(found, free=10 * GIB) == ["old"]


def test_short_of_space_the_least_recently_used_go_first_until_there_is_enough() -> None:
    found = [tree("a", 20), tree("b", 10), tree("c", 5)]  # least recently used first
    sizes = {"a": GIB // 4, "b": GIB // 2, "c": GIB}
    assert chosen(found, free=GIB // 2, sizes=sizes) == ["a", "b"]


def test_one_in_use_is_never_removed_even_when_space_is_short() -> None:
    recent = IN_USE_SEC / HOUR - 0.1
    found = [tree("busy", recent), tree("also", 0)]
    assert chosen(found, free=0, sizes={"busy": GIB, "also": GIB}) == []
