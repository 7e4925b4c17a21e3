"""Names and values as people read them: who an identity is, whom its changes are audited as,
an instant in a stored text, a task's policy on its page."""

import pytest

from bloom.domain.clock import utc_text
from bloom.domain.identity import Identity, Kind, Role, anonymous, open_access
from bloom.runtime.dashboard.present import policy_items


@pytest.mark.parametrize(
    ("identity", "name", "actor"),
    [
        (Identity(Kind.USER, "0190-uuid", Role.ADMIN, label="alice"), "alice", "alice"),
        (
            Identity(Kind.KEY, "k1", Role.ADMIN, label="deploy-bot"),
            "key:deploy-bot",
            "key:deploy-bot",
        ),
        (Identity(Kind.KEY, "k2", Role.WORKER, "pi-4", "pi key"), "pi-4", "pi-4"),
        (Identity(Kind.ADMIN_KEY, "admin", Role.ADMIN), "admin", None),
        (open_access("127.0.0.1"), "127.0.0.1", None),
        (anonymous("198.51.100.1"), "198.51.100.1", None),
    ],
)
def test_an_identity_is_named_and_only_named_callers_are_audited_by_name(
    identity: Identity, name: str, actor: str | None
) -> None:
    assert (identity.name, identity.actor) == (name, actor)


def test_an_instant_is_written_as_iso_utc() -> None:
    assert utc_text(1_795_745_362_956) == "2026-11-27T02:09:22Z"


def test_a_policy_reads_as_names_and_values() -> None:
    policy = {"timeout_sec": 120, "budget": 0.0, "stall_sec": 90.0, "note": "", "tags": ["a"]}
    assert policy_items(policy) == [
        ("budget", "0"),
        ("stall", "1 min 30 s"),
        ("tags", '["a"]'),
        ("timeout", "2 min"),
    ]
    assert policy_items({"budget": 1.5, "retry": True, "max": 12000}) == [
        ("budget", "1.5"),
        ("max", "12,000"),
        ("retry", "yes"),
    ]
