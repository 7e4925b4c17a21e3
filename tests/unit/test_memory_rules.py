"""Memory sync's pure rules: the documents round-trip in the reference's shapes, the lease
decides roles (bootstrap, renewal at half time, takeover only by the preferred or former
primary), the push lock's verdicts, the backups' retention."""

import json

import pytest

from bloom.domain.memory import (
    Backup,
    Keys,
    Lease,
    LockVerdict,
    Manifest,
    PushLock,
    Role,
    chosen_lease,
    expired_backups,
    lock_verdict,
    next_lease,
    parse_sha256_text,
    sha256_text,
)

SHA = "ab" * 32


def lease(primary: str = "a", issued: int = 1000, seconds: int = 100, epoch: int = 4) -> Lease:
    return Lease("cid", primary, issued, issued + seconds, seconds, epoch, issued_by=primary)


def step(
    current: Lease | None, node: str, now: int, preferred: str = ""
) -> tuple[Role, Lease | None]:
    got = next_lease(
        current, canonical_id="cid", node_id=node, preferred=preferred, lease_seconds=100, now=now
    )
    return got.role, got.write


def test_keys_follow_the_reference_layout() -> None:
    keys = Keys("0123456789abcdef")
    assert keys.db == "projects/0123456789abcdef/sqlite/claude-mem.db"
    assert keys.sha256 == keys.db + ".sha256"
    assert keys.manifest == "projects/0123456789abcdef/sqlite/manifest.json"
    assert keys.lock == "projects/0123456789abcdef/locks/active.lock"
    assert keys.lease == "projects/0123456789abcdef/leadership/lease.json"
    assert keys.audit(0, "host/x:1", 3).endswith("/audit/19700101T000000Z-host_x_1-e3.json")


def test_sha256_text_round_trips_and_rejects_garbage() -> None:
    assert sha256_text(SHA) == f"{SHA}  claude-mem.db\n".encode()
    assert parse_sha256_text(sha256_text(SHA)) == SHA
    assert parse_sha256_text(b"") is None
    assert parse_sha256_text(b"nothex  x") is None


def test_manifest_reads_the_reference_fields_and_refuses_a_bad_digest() -> None:
    doc = {"project": "mem", "canonical_id": "c", "timestamp": "t", "source_host": "h",
           "db_size": 10, "sha256": SHA, "observations": 3, "session_summaries": 1,
           "user_prompts": 2, "tables": 5}  # fmt: skip
    manifest = Manifest.from_json(json.dumps(doc).encode())
    assert (manifest.observations, manifest.epoch, manifest.snapshot) == (3, None, None)
    assert json.loads(manifest.to_json()) == doc
    with pytest.raises(ValueError, match="sha256"):
        Manifest.from_json(json.dumps(doc | {"sha256": "short"}).encode())
    with pytest.raises(ValueError, match="db_size"):
        Manifest.from_json(json.dumps(doc | {"db_size": "ten"}).encode())


def test_no_lease_bootstraps_epoch_one_for_the_preferred_node_or_this_one() -> None:
    role, write = step(None, "a", 50)
    assert role is Role.PRIMARY
    assert write is not None
    assert (write.primary_node_id, write.epoch, write.expires_at) == ("a", 1, 150)
    assert write.needs_ui_selection
    role, write = step(None, "a", 50, preferred="b")
    assert role is Role.SECONDARY
    assert write is not None
    assert write.primary_node_id == "b"
    assert not write.needs_ui_selection


def test_a_valid_lease_decides_and_its_primary_renews_past_half_time() -> None:
    current = lease()
    assert step(current, "a", 1010) == (Role.PRIMARY, None)
    assert step(current, "b", 1060, preferred="b") == (Role.SECONDARY, None)
    role, renewal = step(current, "a", 1050)
    assert role is Role.PRIMARY
    assert renewal is not None
    assert (renewal.epoch, renewal.expires_at) == (4, 1150), "a renewal keeps the epoch"


def test_an_expired_lease_goes_to_the_preferred_or_former_primary_with_the_next_epoch() -> None:
    current = lease()
    role, write = step(current, "b", 1100, preferred="b")
    assert role is Role.PRIMARY
    assert write is not None
    assert write.epoch == 5
    role, write = step(current, "a", 1100)
    assert role is Role.PRIMARY
    assert write is not None
    assert write.epoch == 5
    assert step(current, "b", 1100) == (Role.SECONDARY, None)
    assert step(current, "a", 1100, preferred="b") == (Role.SECONDARY, None)


def test_a_choice_outranks_both_epochs() -> None:
    chosen = chosen_lease(
        lease(epoch=4), canonical_id="cid", primary_node_id="b", lease_seconds=60,
        issued_by="membridge", now=5, min_epoch=7,
    )  # fmt: skip
    assert (chosen.primary_node_id, chosen.epoch, chosen.expires_at) == ("b", 8, 65)
    assert Lease.from_json(chosen.to_json()) == chosen


def verdict(
    lock: PushLock | None, node: str = "b", now: int = 1010, epoch: int = 2, force: bool = False
) -> LockVerdict:
    return lock_verdict(lock, node_id=node, epoch=epoch, now=now, ttl=100, grace=10, force=force)


def test_lock_verdicts() -> None:
    held = PushLock("host-a", 1000, "mem", "cid", node_id="a", epoch=2)
    assert verdict(None) is LockVerdict.FREE
    assert verdict(held, node="a") is LockVerdict.MINE
    assert verdict(held) is LockVerdict.HELD
    assert verdict(held, now=1105) is LockVerdict.HELD, "within the grace period"
    assert verdict(held, now=1111) is LockVerdict.STALE
    assert verdict(held, force=True) is LockVerdict.STALE
    assert verdict(held, epoch=3) is LockVerdict.STALE, "its holder lost leadership since"
    reference = PushLock.from_json(b'{"hostname": "a", "timestamp": 5, "project": "p"}')
    assert reference.holder() == "a"
    assert reference.epoch == 0


def test_backups_retention_by_age_then_count() -> None:
    day = 86_400
    backups = [Backup(f"b{i}", made_at=100 * day - i * day) for i in range(6)]
    assert expired_backups(backups, now=100 * day, max_days=3, max_count=10) == ["b4", "b5"]
    assert expired_backups(backups, now=100 * day, max_days=30, max_count=2) == [
        "b2", "b3", "b4", "b5",
    ]  # fmt: skip
