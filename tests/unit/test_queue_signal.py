"""Which waiting claims a change wakes, and what a queue notification carries."""

import asyncio

from bloom.runtime.services.signals import EVERYONE, ONE, QueueSignal, Wake
from bloom.runtime.storage.notifications import MAX_NAMED_WORKERS, PAYLOAD_BYTES


async def test_a_change_wakes_the_newest_waiters_it_counts() -> None:
    signal = QueueSignal()
    with signal.waiting("a") as a, signal.waiting("b") as b, signal.waiting("c") as c:
        signal.wake(Wake(2))  # the oldest claim is the nearest to the end of its long poll
        assert (a.is_set(), b.is_set(), c.is_set()) == (False, True, True)
        assert signal.waiters == 1  # the woken ones are no longer waiting
        signal.wake(ONE)
        assert a.is_set()
    assert signal.waiters == 0


async def test_a_change_wakes_every_claim_of_the_workers_it_names() -> None:
    signal = QueueSignal()
    with (
        signal.waiting("a") as a,
        signal.waiting("b") as b1,
        signal.waiting("c") as c,
        signal.waiting("b") as b2,
    ):
        signal.wake(Wake(1, frozenset({"b"})))
        # b's two claims, and one more: the newest of the others
        assert (a.is_set(), b1.is_set(), c.is_set(), b2.is_set()) == (False, True, True, True)
        signal.wake(Wake(0, frozenset({"nobody"})))
        assert not a.is_set()
        signal.wake(EVERYONE)
        assert a.is_set()


async def test_a_claim_that_stopped_waiting_is_not_woken_in_anothers_place() -> None:
    signal = QueueSignal()
    with signal.waiting("gone"):
        pass
    with signal.waiting("here") as here:
        signal.wake(ONE)
        assert here.is_set()


async def test_every_change_tells_the_events_followers() -> None:
    published: list[Wake] = []
    signal = QueueSignal(published.append)
    follower = signal.any_change()
    signal.changed(Wake(0, frozenset({"w"})))  # wakes no claim
    assert follower.is_set()
    assert not signal.any_change().is_set()
    assert published == [Wake(0, frozenset({"w"}))]


async def test_passing_on_wakes_one_more_here_only() -> None:
    published: list[Wake] = []
    signal = QueueSignal(published.append)
    with signal.waiting("a") as a, signal.waiting("b") as b:
        signal.passed_on()
        assert (a.is_set(), b.is_set()) == (False, True)
    assert published == []


def test_wakes_fold_together() -> None:
    assert Wake(1) | Wake(2, frozenset({"x"})) == Wake(3, frozenset({"x"}))
    assert Wake(1) | EVERYONE == EVERYONE
    many = Wake(0, frozenset(f"w{n}" for n in range(MAX_NAMED_WORKERS)))
    assert many | Wake(0, frozenset({"one-more"})) == EVERYONE


def test_a_wake_survives_the_notification() -> None:
    for wake in (Wake(0), Wake(5, frozenset({"a", "b"})), EVERYONE):
        assert Wake.parse(wake.payload("me")) == (wake, "me")
    long_names = Wake(0, frozenset(f"w{n:0200d}" for n in range(MAX_NAMED_WORKERS)))
    payload = long_names.payload("me")
    assert len(payload.encode()) <= PAYLOAD_BYTES
    assert Wake.parse(payload) == (EVERYONE, "me")  # too long for a NOTIFY: everyone
    # an older process's notification carries nothing: it woke everyone, and still does
    for unreadable in ("", "nonsense", '{"n": "x", "w": []}', "[1]", '{"n": 1, "w": 2}'):
        assert Wake.parse(unreadable)[0] == EVERYONE


async def test_a_waiter_set_before_the_wait_returns_at_once() -> None:
    signal = QueueSignal()
    with signal.waiting("a") as event:
        signal.wake(ONE)  # a change between the claim's look and its wait
        await asyncio.wait_for(event.wait(), 1)


async def test_a_claim_that_can_take_nothing_is_woken_only_by_name() -> None:
    signal = QueueSignal()
    with signal.waiting("full", able=False) as full, signal.waiting("free") as free:
        signal.wake(ONE)
        assert (full.is_set(), free.is_set()) == (False, True)
        signal.wake(Wake(1, frozenset({"full"})))  # a slot of its came free
        assert full.is_set()
