from typing import Any

from bloom.db.repository import to_entity
from bloom.domain.models import Artifact, Lease
from bloom.domain.states import LeaseStatus


def test_a_row_becomes_an_entity_with_its_state_as_the_enum() -> None:
    row: dict[str, Any] = {
        "id": "l1",
        "task_id": "t1",
        "worker_id": "w1",
        "started_at": 1,
        "expires_at": 2,
        "ttl_seconds": 300,
        "status": "expired",
        "last_heartbeat": 1,
        "context_id": None,
    }
    lease = to_entity(Lease, row)
    assert lease.status is LeaseStatus.EXPIRED
    assert row["status"] == "expired"  # the row is left as it was


def test_an_entity_without_states_is_built_as_it_is() -> None:
    row: dict[str, Any] = {
        "id": "a1",
        "task_id": "t1",
        "job_id": None,
        "type": "LLM_RESULT",
        "created_at": 1,
        "finalized": True,
        "url": None,
        "entity_refs": [],
        "tags": [],
        "content": "hi",
    }
    assert to_entity(Artifact, row) == Artifact(**row)
