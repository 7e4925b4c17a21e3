"""Reading Membridge's agent list (ours, or the reference's looser one), and who has gone quiet."""

from typing import Any

import pytest

from bloom.domain.fleet import epoch_ms, gone_quiet, parse_agent, parse_sighting
from bloom.domain.models import Worker
from bloom.domain.states import WorkerStatus


def test_the_documented_registration_body_reads_as_an_online_agent() -> None:
    agent = parse_agent(
        {
            "name": "worker-01",
            "status": "online",
            "capabilities": {"claude_cli": True, "max_concurrency": 1, "labels": ["production"]},
            "registered_at": 1772042245.043,
            "last_seen": 1772042300.5,
        }
    )
    assert agent is not None
    assert (agent.id, agent.url, agent.status) == ("worker-01", "", "online")
    assert agent.capabilities == {
        "claude_cli": True,
        "max_concurrency": 1,
        "labels": ["production"],
    }
    assert agent.last_seen == 1772042300500  # float seconds become epoch milliseconds


def test_the_reference_agent_shape_gets_the_seed_defaults() -> None:
    """The reference control plane lists {name, url, status, registered_at, last_seen} only."""
    agent = parse_agent({"name": "rpi-4", "url": "http://10.0.0.7:8001", "status": "unknown"})
    assert agent is not None
    assert agent.status == "unknown"
    assert agent.capabilities == {"claude_cli": True, "max_concurrency": 1, "labels": []}
    assert agent.last_seen is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"node_id": "n1"}, "n1"),
        ({"id": "n2", "max_concurrency": 4, "labels": ["arm"]}, "n2"),
        ({"name": "n3", "capabilities": {"max_concurrency": 99}}, "n3"),
    ],
)
def test_alternative_names_and_flat_capabilities(raw: dict[str, Any], expected: str) -> None:
    agent = parse_agent(raw)
    assert agent is not None
    assert agent.id == expected
    assert 1 <= agent.capabilities["max_concurrency"] <= 32


@pytest.mark.parametrize(
    "raw",
    [None, "worker", {}, {"name": ""}, {"name": "a/b"}, {"name": 5}, {"name": " spaced"}],
)
def test_unusable_entries_are_skipped(raw: Any) -> None:
    assert parse_agent(raw) is None


def test_a_made_up_status_becomes_unknown() -> None:
    agent = parse_agent({"name": "w", "status": "dancing"})
    assert agent is not None
    assert agent.status == "unknown"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1772042300.5, 1772042300500),
        (1772042300500, 1772042300500),
        (None, None),
        (True, None),
        (-1, None),
        ("1", None),
    ],
)
def test_epoch_ms(value: Any, expected: int | None) -> None:
    assert epoch_ms(value) == expected


def worker(
    worker_id: str,
    *,
    status: WorkerStatus = WorkerStatus.ONLINE,
    heartbeat: int | None,
    listed: int | None,
) -> Worker:
    return Worker(
        id=worker_id,
        node_id=worker_id,
        url="",
        status=status,
        capabilities={},
        last_heartbeat=heartbeat,
        ip_addrs=[],
        obs_count=0,
        db_sha="",
        registered_at=0,
        active_leases=0,
        agent_version="",
        os_info="",
        install_method="",
        membridge_seen_at=listed,
    )


def test_gone_quiet_needs_silence_on_both_channels() -> None:
    cutoff = 1_000
    workers = [
        worker("direct", heartbeat=5_000, listed=None),  # heard directly: stays
        worker("listed-recently", heartbeat=None, listed=2_000),  # listed recently: stays
        worker("listed-now", heartbeat=None, listed=None),  # in this listing: stays
        worker("quiet", heartbeat=500, listed=900),  # silent on both since the cutoff: goes
        worker(
            "offline", status=WorkerStatus.OFFLINE, heartbeat=None, listed=None
        ),  # already offline
    ]
    quiet = gone_quiet(workers, listed={"listed-now"}, cutoff=cutoff)
    assert [w.id for w in quiet] == ["quiet"]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"node_id": "n1", "last_seen": 1_700_000_000.5, "projects": 2}, ("n1", 1_700_000_000_500)),
        ({"node_id": "n1", "last_seen": 1_700_000_000_500}, ("n1", 1_700_000_000_500)),
        ({"node_id": "bad/name", "last_seen": 1.0}, None),
        ({"node_id": "n1"}, None),
        ({"node_id": 5, "last_seen": 1.0}, None),
        (["n1"], None),
    ],
)
def test_a_node_sighting_is_read_or_skipped(raw: object, expected: tuple[str, int] | None) -> None:
    sighting = parse_sighting(raw)
    assert (None if sighting is None else (sighting.id, sighting.seen_at)) == expected
