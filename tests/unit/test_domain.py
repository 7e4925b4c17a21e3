"""Pure domain rules: worker routing, retry policy, secret masking and time-ordered ids."""

import base64
import itertools
import random
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given
from hypothesis import strategies as st

import bloom.domain.ids as ids
from bloom.domain.retry import (
    ErrorCode,
    Outcome,
    RetryPolicy,
    expiry_outcome,
    failure_outcome,
)
from bloom.domain.routing import WorkerLoad, pick_worker
from bloom.domain.secrets import last_four, mask_secret
from bloom.domain.states import TaskStatus

NOW = 1_750_000_000_000


def load(
    worker_id: str,
    *,
    status: str = "online",
    claude_cli: bool = True,
    slots: int = 1,
    active: int = 0,
    heartbeat: int | None = NOW,
) -> WorkerLoad:
    return WorkerLoad(
        id=worker_id,
        status=status,
        claude_cli=claude_cli,
        max_concurrency=slots,
        active_leases=active,
        last_heartbeat=heartbeat,
    )


# routing.pick_worker


@pytest.mark.parametrize(
    "excluded",
    [
        load("w", status="offline"),
        load("w", status="unknown"),
        load("w", status="syncing"),
        load("w", status="error"),
        load("w", claude_cli=False),
        load("w", slots=2, active=2),
        load("w", slots=1, active=3),
    ],
    ids=["offline", "unknown", "syncing", "error", "no-claude-cli", "full", "over-full"],
)
def test_pick_worker_considers_only_online_claude_workers_with_a_free_slot(
    excluded: WorkerLoad,
) -> None:
    """A worker that is not online, lacks claude_cli or has no free slot is never picked, not
    even when it is the only one or the sticky one."""
    assert pick_worker([excluded], None) is None
    assert pick_worker([excluded], "w") is None
    fallback = load("z-other", slots=1)
    assert pick_worker([excluded, fallback], "w") == fallback


def test_pick_worker_returns_none_without_workers() -> None:
    """No workers at all: nothing to pick (the API then answers 503)."""
    assert pick_worker([], None) is None
    assert pick_worker([], "w1") is None


def test_sticky_worker_wins_when_it_is_a_candidate() -> None:
    """The worker that holds the context keeps it, even with fewer free slots than others."""
    sticky = load("sticky", slots=2, active=1)
    roomy = load("roomy", slots=8)
    assert pick_worker([roomy, sticky], "sticky") == sticky


@pytest.mark.parametrize(
    "sticky",
    [load("sticky", slots=2, active=2), load("sticky", status="offline", slots=8)],
    ids=["full", "offline"],
)
def test_sticky_worker_is_ignored_when_full_or_offline(sticky: WorkerLoad) -> None:
    """A sticky worker that cannot take the task falls back to the capacity ordering."""
    other = load("other", slots=2)
    third = load("third", slots=1)
    assert pick_worker([sticky, third, other], "sticky") == other


def test_unknown_sticky_id_falls_back_to_capacity() -> None:
    """A sticky id that names no worker (e.g. one since removed) changes nothing."""
    small, big = load("a", slots=1), load("b", slots=3)
    assert pick_worker([small, big], "gone") == big


def test_most_free_slots_then_freshest_heartbeat_then_id() -> None:
    """Without stickiness: most free slots; ties go to the freshest heartbeat, then smaller id."""
    busy_big = load("a", slots=4, active=3)  # 1 free
    two_free_old = load("b", slots=3, active=1, heartbeat=NOW - 5_000)  # 2 free
    two_free_new = load("c", slots=2, heartbeat=NOW)  # 2 free, fresher
    assert pick_worker([busy_big, two_free_old, two_free_new], None) == two_free_new

    same_a = load("w-a", slots=2, heartbeat=NOW)
    same_b = load("w-b", slots=2, heartbeat=NOW)
    assert pick_worker([same_b, same_a], None) == same_a

    never_beat = load("n", slots=2, heartbeat=None)
    beat = load("z", slots=2, heartbeat=1)
    assert pick_worker([never_beat, beat], None) == beat


worker_loads = st.builds(
    WorkerLoad,
    id=st.sampled_from([f"w{i}" for i in range(6)]),
    status=st.sampled_from(["online", "online", "offline", "unknown"]),
    claude_cli=st.booleans(),
    max_concurrency=st.integers(1, 32),
    active_leases=st.integers(0, 34),
    last_heartbeat=st.one_of(st.none(), st.integers(0, 10**13)),
)


@given(
    workers=st.lists(worker_loads, max_size=8, unique_by=lambda w: w.id),
    sticky=st.one_of(st.none(), st.sampled_from([f"w{i}" for i in range(7)])),
    seed=st.integers(0, 2**32),
)
def test_pick_worker_properties(workers: list[WorkerLoad], sticky: str | None, seed: int) -> None:
    """Whatever the fleet: the choice is a candidate, it is the sticky worker whenever that one
    is a candidate, otherwise it is the best by (free slots, heartbeat, id), and it does not
    depend on the order in which the workers are listed."""
    choice = pick_worker(workers, sticky)
    candidates = [w for w in workers if w.is_candidate]
    if not candidates:
        assert choice is None
        return
    assert choice is not None
    assert choice.is_candidate
    sticky_candidate = next((w for w in candidates if w.id == sticky), None)
    if sticky_candidate is not None:
        assert choice == sticky_candidate
    else:
        best = max(candidates, key=lambda w: (w.free_slots, w.last_heartbeat or 0))
        assert (choice.free_slots, choice.last_heartbeat or 0) == (
            best.free_slots,
            best.last_heartbeat or 0,
        )
        ties = [
            w
            for w in candidates
            if (w.free_slots, w.last_heartbeat or 0) == (best.free_slots, best.last_heartbeat or 0)
        ]
        assert choice.id == min(w.id for w in ties)
    shuffled = list(workers)
    random.Random(seed).shuffle(shuffled)
    assert pick_worker(shuffled, sticky) == choice


# retry


def test_backoff_doubles_from_15_seconds_and_is_capped() -> None:
    """15 s, 30 s, 60 s, 120 s ... after the 1st, 2nd, 3rd, 4th attempt; never above the cap."""
    policy = RetryPolicy()
    assert [policy.backoff_ms(n) for n in range(1, 8)] == [
        15_000,
        30_000,
        60_000,
        120_000,
        240_000,
        480_000,
        600_000,
    ]
    assert policy.backoff_ms(50) == 600_000
    assert policy.backoff_ms(0) == 15_000
    small_cap = RetryPolicy(base_ms=1_000, max_ms=5_000)
    assert [small_cap.backoff_ms(n) for n in range(1, 6)] == [1_000, 2_000, 4_000, 5_000, 5_000]


@given(st.integers(1, 100_000))
def test_backoff_is_capped_for_any_attempt_count(attempts: int) -> None:
    """However many attempts, the delay stays between the base and the cap (no overflow)."""
    delay = RetryPolicy().backoff_ms(attempts)
    assert 15_000 <= delay <= 600_000


RETRYABLE = [ErrorCode.ERROR, ErrorCode.CLI_ERROR, ErrorCode.TIMEOUT, ErrorCode.INVALID_OUTPUT]
POLICY = RetryPolicy()


def outcome(
    code: ErrorCode,
    attempts: int = 1,
    max_attempts: int = 3,
    retry_at: int | None = None,
    cancel_requested: bool = False,
) -> Outcome:
    return failure_outcome(
        code,
        attempts=attempts,
        max_attempts=max_attempts,
        now=NOW,
        retry_at=retry_at,
        cancel_requested=cancel_requested,
        policy=POLICY,
    )


@pytest.mark.parametrize("code", RETRYABLE)
def test_retryable_failure_requeues_with_backoff_while_attempts_remain(code: ErrorCode) -> None:
    """An ordinary failure goes back to the queue, not before now + backoff(attempts)."""
    assert outcome(code, attempts=1) == Outcome(TaskStatus.QUEUED, not_before=NOW + 15_000)
    assert outcome(code, attempts=2) == Outcome(TaskStatus.QUEUED, not_before=NOW + 30_000)
    assert outcome(code, attempts=3, max_attempts=5) == Outcome(
        TaskStatus.QUEUED, not_before=NOW + 60_000
    )


@pytest.mark.parametrize("code", RETRYABLE)
def test_retryable_failure_is_dead_when_attempts_are_spent(code: ErrorCode) -> None:
    """The last allowed attempt failing makes the task dead (no further automatic retry)."""
    assert outcome(code, attempts=3, max_attempts=3) == Outcome(TaskStatus.DEAD)
    assert outcome(code, attempts=1, max_attempts=1) == Outcome(TaskStatus.DEAD)
    assert outcome(code, attempts=4, max_attempts=3) == Outcome(TaskStatus.DEAD)


@pytest.mark.parametrize("code", RETRYABLE)
def test_retry_at_later_than_backoff_is_respected(code: ErrorCode) -> None:
    """A worker's retry_at postpones the retry when it is later than the backoff, never earlier."""
    later = NOW + 3_600_000
    assert outcome(code, retry_at=later) == Outcome(TaskStatus.QUEUED, not_before=later)
    earlier = NOW + 1_000
    assert outcome(code, retry_at=earlier) == Outcome(TaskStatus.QUEUED, not_before=NOW + 15_000)
    assert outcome(code, attempts=3, retry_at=later) == Outcome(TaskStatus.DEAD)


@pytest.mark.parametrize("code", [ErrorCode.BUDGET_EXCEEDED, ErrorCode.FATAL])
@pytest.mark.parametrize("attempts", [1, 3])
def test_non_retryable_failure_fails_for_good(code: ErrorCode, attempts: int) -> None:
    """Budget exceeded and fatal errors end in `failed` at once, attempts left or not."""
    assert outcome(code, attempts=attempts, retry_at=NOW + 5_000) == Outcome(TaskStatus.FAILED)


@pytest.mark.parametrize("code", [ErrorCode.RATE_LIMITED, ErrorCode.USAGE_LIMIT])
@pytest.mark.parametrize("attempts", [1, 3])
def test_rate_and_usage_limits_retry_later_and_refund_the_attempt(
    code: ErrorCode, attempts: int
) -> None:
    """Rate/usage limits requeue after the rate-limit delay (or the given retry_at) without
    burning an attempt, even when the attempt budget is otherwise spent."""
    assert outcome(code, attempts=attempts) == Outcome(
        TaskStatus.QUEUED, not_before=NOW + POLICY.rate_limit_delay_ms, refund_attempt=True
    )
    reset = NOW + 7_200_000
    assert outcome(code, attempts=attempts, retry_at=reset) == Outcome(
        TaskStatus.QUEUED, not_before=reset, refund_attempt=True
    )
    assert outcome(code, attempts=attempts, retry_at=NOW - 1) == Outcome(
        TaskStatus.QUEUED, not_before=NOW + POLICY.rate_limit_delay_ms, refund_attempt=True
    )


def test_cancelled_error_code_cancels() -> None:
    """A worker that stopped because of a cancel reports `cancelled`: the task is cancelled."""
    assert outcome(ErrorCode.CANCELLED) == Outcome(TaskStatus.CANCELLED)
    assert outcome(ErrorCode.CANCELLED, attempts=3) == Outcome(TaskStatus.CANCELLED)


@pytest.mark.parametrize("code", list(ErrorCode))
def test_cancel_requested_wins_over_every_error_code(code: ErrorCode) -> None:
    """Once an operator asked to cancel, a failed attempt ends the task as cancelled, whatever
    the code, the attempts left or the retry_at."""
    assert outcome(code, cancel_requested=True, retry_at=NOW + 9_000) == Outcome(
        TaskStatus.CANCELLED
    )


def test_every_error_code_has_a_decided_outcome() -> None:
    """No code falls through: each maps to a definite next state on a first attempt."""
    expected = {
        ErrorCode.ERROR: TaskStatus.QUEUED,
        ErrorCode.CLI_ERROR: TaskStatus.QUEUED,
        ErrorCode.TIMEOUT: TaskStatus.QUEUED,
        ErrorCode.INVALID_OUTPUT: TaskStatus.QUEUED,
        ErrorCode.BUDGET_EXCEEDED: TaskStatus.FAILED,
        ErrorCode.FATAL: TaskStatus.FAILED,
        ErrorCode.AUTH_FAILED: TaskStatus.FAILED,
        ErrorCode.RATE_LIMITED: TaskStatus.QUEUED,
        ErrorCode.USAGE_LIMIT: TaskStatus.QUEUED,
        ErrorCode.CANCELLED: TaskStatus.CANCELLED,
        ErrorCode.APPROVAL_REQUIRED: TaskStatus.AWAITING_APPROVAL,
    }
    assert set(expected) == set(ErrorCode)
    assert {code: outcome(code).status for code in ErrorCode} == expected


def test_expiry_outcome() -> None:
    """An expired lease requeues its task at once while attempts remain, else the task is
    dead; a requested cancel turns it into cancelled."""
    assert expiry_outcome(attempts=1, max_attempts=3, cancel_requested=False) == "queued"
    assert expiry_outcome(attempts=2, max_attempts=3, cancel_requested=False) == "queued"
    assert expiry_outcome(attempts=3, max_attempts=3, cancel_requested=False) == "dead"
    assert expiry_outcome(attempts=5, max_attempts=3, cancel_requested=False) == "dead"
    assert expiry_outcome(attempts=1, max_attempts=3, cancel_requested=True) == "cancelled"
    assert expiry_outcome(attempts=3, max_attempts=3, cancel_requested=True) == "cancelled"


# masking


@pytest.mark.parametrize(
    ("secret", "shown"),
    [
        ("", ""),
        ("a", "****"),
        ("abcd", "****"),
        ("12345678", "****"),
        ("123456789", "1234****6789"),
        ("abcdefghijklmnopqrstuvwxyz", "abcd****wxyz"),
        ("ключ-секрет-1", "ключ****ет-1"),
    ],
)
def test_mask_secret(secret: str, shown: str) -> None:
    """The seed's masking: "" stays "", up to 8 characters become ****, else first4****last4."""
    assert mask_secret(secret) == shown


@given(st.text(min_size=9, max_size=200))
def test_mask_secret_never_reveals_more_than_eight_characters(secret: str) -> None:
    """A long secret shows exactly its first and last four characters around ****."""
    assert mask_secret(secret) == secret[:4] + "****" + secret[-4:]


@pytest.mark.parametrize(
    ("secret", "shown"),
    [("", ""), ("short", "****"), ("123456789", "****6789"), ("abcd-secret-wxyz", "****wxyz")],
)
def test_last_four_shows_people_at_most_the_last_four(secret: str, shown: str) -> None:
    assert last_four(mask_secret(secret)) == shown


# ids


@contextmanager
def fresh_id_state() -> Iterator[None]:
    """Start the id generator from scratch; its real state comes back afterwards."""
    saved = ids._last_ms, ids._counter
    ids._last_ms, ids._counter = 0, 0
    try:
        yield
    finally:
        ids._last_ms, ids._counter = saved


def ms_of(value: str) -> int:
    return uuid.UUID(value).int >> 80


def test_new_id_is_a_uuid_version_7_embedding_the_millisecond() -> None:
    """The id is a canonical UUID string, version 7, RFC 4122 variant, its first 48 bits the
    creation time in epoch ms."""
    with fresh_id_state():
        value = ids.new_id(NOW)
        parsed = uuid.UUID(value)
        assert str(parsed) == value
        assert parsed.version == 7
        assert parsed.variant == uuid.RFC_4122
        assert (parsed.int >> 62) & 0b11 == 0b10
        assert ms_of(value) == NOW
        assert value[:13].replace("-", "") == f"{NOW:012x}"


def test_new_ids_strictly_increase_within_one_millisecond() -> None:
    """10,000 ids made in the same millisecond are unique and sort in creation order (as
    strings and as integers); past 4,096 the generator borrows the next milliseconds."""
    with fresh_id_state():
        made = [ids.new_id(NOW) for _ in range(10_000)]
        assert len(set(made)) == len(made)
        assert made == sorted(made)
        ints = [uuid.UUID(v).int for v in made]
        assert all(a < b for a, b in itertools.pairwise(ints))
        assert ms_of(made[0]) == NOW
        assert ms_of(made[4095]) == NOW
        assert ms_of(made[4096]) == NOW + 1
        assert all(uuid.UUID(v).version == 7 for v in made)


def test_new_ids_never_go_backwards_when_the_clock_does() -> None:
    """An earlier `now_ms` (clock stepped back) still yields a larger id than the last one."""
    with fresh_id_state():
        first = ids.new_id(NOW)
        second = ids.new_id(NOW - 60_000)
        assert second > first
        later = ids.new_id(NOW + 5)
        assert later > second
        assert ms_of(later) == NOW + 5


def test_new_ids_are_unique_across_threads() -> None:
    """Threads making ids at once never get the same one."""
    with fresh_id_state():
        made: list[list[str]] = [[] for _ in range(4)]

        def make(out: list[str]) -> None:
            out.extend(ids.new_id(NOW) for _ in range(2_000))

        threads = [threading.Thread(target=make, args=(out,)) for out in made]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        everything = [value for out in made for value in out]
        assert len(set(everything)) == 8_000
        for out in made:
            assert out == sorted(out)


@given(st.lists(st.integers(1, 2**47), min_size=1, max_size=50))
def test_new_ids_increase_for_any_clock_sequence(times: list[int]) -> None:
    """Whatever sequence of clock readings, each id is larger than the one before."""
    with fresh_id_state():
        made = [ids.new_id(t) for t in times]
        assert made == sorted(made)
        assert len(set(made)) == len(made)


def test_failed_logins_lock_out_from_the_limit_on_doubling_up_to_the_cap() -> None:
    from bloom.domain.credentials import LoginPolicy

    policy = LoginPolicy(backoff=RetryPolicy(base_ms=2_000, max_ms=60_000))
    assert [policy.lockout_sec(n, 5) for n in range(1, 12)] == [0, 0, 0, 0, 2, 4, 8, 16, 32, 60, 60]
    assert policy.lockout_sec(10**6, 5) == 60
    assert policy.lockout_sec(1, 1) == 2


def test_the_decoy_hash_costs_what_a_real_password_check_costs_and_matches_nothing() -> None:
    from bloom.domain.credentials import DECOY_HASH, hash_password, verify_password

    def cost(stored: str) -> list[str]:
        scheme, n, r, p, _, digest = stored.split("$")
        return [scheme, n, r, p, str(len(base64.b64decode(digest)))]

    real = hash_password("a real password")
    assert cost(DECOY_HASH) == cost(real)
    assert not verify_password("", DECOY_HASH)
    assert verify_password("a real password", real)
