"""`retimed`: an id made at one instant, moved to a later one, as a statement composes it
(`_CLAIM_GRANTING`: a grant's audit id, its time known only once the task is claimed)."""

import uuid

from bloom.domain.ids import id_time, new_id, retimed


def test_a_retimed_id_carries_the_later_instant_and_keeps_its_tail() -> None:
    made = new_id(1_795_772_652_072)
    assert id_time(made) >= 1_795_772_652_072
    moved = retimed(made, id_time(made) + 8)
    assert moved[13:] == made[13:]
    assert uuid.UUID(moved).int >> 80 == id_time(made) + 8 == id_time(moved)
    assert uuid.UUID(moved).version == 7
    assert moved > made


def test_an_id_is_never_moved_back() -> None:
    made = new_id(1_800_000_000_000)
    assert retimed(made, 1_000) == made
    assert retimed(made, id_time(made)) == made


def test_a_retimed_id_sorts_after_the_ids_made_before_it() -> None:
    base = 1_900_000_000_000  # later than any id made before in this process
    earlier = new_id(base + 2_000)
    made = new_id(base + 1_000)  # ids never go backwards: made in base + 2,000's millisecond
    assert earlier < made < retimed(made, base + 3_000) < new_id(base + 4_000)
    assert earlier < retimed(made, base) == made
