"""A claim's end: within its wait's second half, on its worker's phase, so that a fleet whose
claims began together comes back spread over time, each worker then every full wait."""

from collections import Counter

from bloom.domain.long_poll import claim_deadline

WAIT = 20_000


def test_a_claim_ends_in_the_second_half_of_its_wait_on_its_workers_phase():
    for started in (0, 1, 9_999, 1_795_762_752_173):
        for worker in ("w1", "fleet-3cac1b41-1999", "x" * 128):
            end = claim_deadline(started, WAIT, worker)
            assert started + WAIT // 2 < end <= started + WAIT
            assert end % (WAIT // 2) == claim_deadline(0, WAIT, worker) % (WAIT // 2)


def test_a_worker_that_claims_again_at_once_waits_a_full_wait_each_time():
    started = 1_795_762_752_173
    first = claim_deadline(started, WAIT, "w7")
    second = claim_deadline(first + 3, WAIT, "w7")  # the next claim, a round trip later
    assert second - first == WAIT
    assert claim_deadline(second + 40, WAIT, "w7") - second == WAIT


def test_claims_that_began_together_end_spread_over_the_half_wait():
    ends = [claim_deadline(1_000_000, WAIT, f"fleet-{n}") for n in range(2000)]
    per_second = Counter((end - 1_000_000) // 1000 for end in ends)
    assert set(per_second) == set(range(10, 20))  # the second half of the wait, every second
    assert max(per_second.values()) < 2 * 2000 / 10  # none takes twice its share


def test_a_short_wait_ends_when_asked():
    assert claim_deadline(500, 0, "w") == 500
    assert claim_deadline(500, 1, "w") == 501
    assert 500 + 1 <= claim_deadline(500, 3, "w") <= 503
