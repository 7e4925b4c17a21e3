"""The leadership lease raced for real: nodes bootstrapping a project at the same moment, each
with its own client, compare-and-swap against the S3 endpoint. Exactly one primary, every time;
epochs only grow; an operator's choice wins over a renewing primary."""

import asyncio
import time
from pathlib import Path

import pytest

from bloom.domain.ids import canonical_id
from bloom.domain.memory import Keys, Lease, Role
from bloom.memory.leadership import LeaseStore
from bloom.objects.s3 import S3Bucket
from bloom.objects.settings import ObjectStoreSettings
from tests.support.s3 import Bucket


def stores(bucket: Bucket, project: str, n: int) -> list[LeaseStore]:
    settings = ObjectStoreSettings(**bucket.settings())  # type: ignore[arg-type]
    keys = Keys(canonical_id(project))
    return [LeaseStore(S3Bucket(settings), keys) for _ in range(n)]


async def race(bucket: Bucket, project: str, n: int) -> list[tuple[Role, Lease]]:
    """Every node settles the project's (absent) lease at once; each its own client."""
    now = int(time.time())
    nodes = stores(bucket, project, n)
    return await asyncio.gather(
        *(
            store.resolve(node_id=f"n{i}", preferred="", lease_seconds=60, now=now)
            for i, store in enumerate(nodes)
        )
    )


@pytest.mark.parametrize(("nodes", "rounds"), [(2, 30), (5, 10)])
async def test_nodes_bootstrapping_at_once_elect_exactly_one_primary(
    s3_bucket: Bucket, nodes: int, rounds: int
) -> None:
    await stores(s3_bucket, "warm-up", 1)[0].bucket.ensure_bucket()
    for round_ in range(rounds):
        results = await race(s3_bucket, f"race-{round_}", nodes)
        primaries = [f"n{i}" for i, (role, _) in enumerate(results) if role is Role.PRIMARY]
        assert len(primaries) == 1, f"round {round_}: primaries {primaries}"
        assert {lease.primary_node_id for _, lease in results} == set(primaries)
        assert {lease.epoch for _, lease in results} == {1}


async def test_a_choice_and_takeovers_only_raise_the_epoch(
    s3_bucket: Bucket, tmp_path: Path
) -> None:
    a, b, operator = stores(s3_bucket, "epochs", 3)
    now = int(time.time())
    role, lease = await a.resolve(node_id="a", preferred="", lease_seconds=60, now=now)
    assert (role, lease.epoch) == (Role.PRIMARY, 1)
    # The primary renews (half its time gone) while the operator moves leadership to b.
    renewing = a.resolve(node_id="a", preferred="", lease_seconds=60, now=now + 40)
    choosing = operator.choose(
        primary_node_id="b", lease_seconds=60, issued_by="membridge", now=now + 40, min_epoch=0
    )
    _, chosen = await asyncio.gather(renewing, choosing)
    final = (await b.read()).lease
    assert final is not None
    assert final.primary_node_id == "b"
    assert final.epoch == 2 == chosen.epoch
    role_a, _ = await a.resolve(node_id="a", preferred="", lease_seconds=60, now=now + 41)
    role_b, _ = await b.resolve(node_id="b", preferred="", lease_seconds=60, now=now + 41)
    assert (role_a, role_b) == (Role.SECONDARY, Role.PRIMARY)
    # Expired: a node preferring itself takes over with the next epoch; others stay secondary.
    later = now + 200
    role_a, _ = await a.resolve(node_id="a", preferred="", lease_seconds=60, now=later)
    assert role_a is Role.SECONDARY
    role_a, taken = await a.resolve(node_id="a", preferred="a", lease_seconds=60, now=later)
    assert (role_a, taken.epoch) == (Role.PRIMARY, 3)
    audits = s3_bucket.keys(f"{a.keys.prefix}/leadership/audit/")
    assert len(audits) >= 3, "every lease write leaves an audit object"
