"""Membridge over HTTP: node heartbeats, the nodes of a project and its leadership (§8.2)."""

import time
from typing import Any

import httpx
import pytest

from bloom.domain.ids import canonical_id
from tests.process.membridge_api.calls import ok, unique


def beat(http: httpx.Client, node: str, cid: str, **fields: Any) -> dict[str, Any]:
    reply: dict[str, Any] = ok(
        http.post("/agent/heartbeat", json={"node_id": node, "canonical_id": cid} | fields)
    )
    return reply


def test_heartbeat_returns_ok_and_the_canonical_id(http: httpx.Client) -> None:
    cid = canonical_id(unique("proj"))
    assert beat(http, "node-1", cid) == {"ok": True, "role": "unknown", "canonical_id": cid}


def test_unknown_project_has_no_nodes_then_a_heartbeat_adds_one(http: httpx.Client) -> None:
    cid = canonical_id(unique("proj"))
    assert ok(http.get(f"/projects/{cid}/nodes")) == []
    before = time.time()
    beat(http, "node-1", cid, obs_count=5, db_sha="abc", last_seen=1000.5, ip_addrs=["10.0.0.1"])
    [node] = ok(http.get(f"/projects/{cid}/nodes"))
    assert node == {
        "node_id": "node-1",
        "canonical_id": cid,
        "role": "unknown",
        "obs_count": 5,
        "db_sha": "abc",
        "last_seen": node["last_seen"],
        "reported_last_seen": 1000.5,
        "ip_addrs": ["10.0.0.1"],
        "registered_at": node["registered_at"],
        "project_id": None,
        "agent_version": None,
    }
    # the server's clock, not the node's stale 1000.5
    assert node["last_seen"] >= before - 5
    assert node["registered_at"] == node["last_seen"]


def test_leadership_of_a_project_without_nodes(http: httpx.Client) -> None:
    cid = canonical_id(unique("proj"))
    assert ok(http.get(f"/projects/{cid}/leadership")) == {
        "canonical_id": cid,
        "preferred_primary": None,
        "primary_node_id": None,
        "needs_ui_selection": False,  # no node reports on it: nothing to choose from
        "node_count": 0,
        "nodes": [],
        "epoch": 0,
        "issued_at": None,
        "expires_at": None,
        "lease_seconds": None,
        "expired": False,
    }


def test_select_after_two_heartbeats_sets_primary_and_secondary(http: httpx.Client) -> None:
    cid = canonical_id(unique("proj"))
    beat(http, "node-a", cid)
    beat(http, "node-b", cid)
    reply = ok(http.post(f"/projects/{cid}/leadership/select", json={"primary_node_id": "node-a"}))
    assert reply["ok"] is True
    assert (reply["canonical_id"], reply["primary_node_id"]) == (cid, "node-a")
    assert (reply["lease_seconds"], reply["epoch"]) == (3600, 1)
    assert reply["expires_at"] == pytest.approx(reply["issued_at"] + 3600)
    assert reply["detail"].startswith("Leadership preference set: primary=node-a.")
    roles = {n["node_id"]: n["role"] for n in ok(http.get(f"/projects/{cid}/nodes"))}
    assert roles == {"node-a": "primary", "node-b": "secondary"}
    leadership = ok(http.get(f"/projects/{cid}/leadership"))
    assert (leadership["preferred_primary"], leadership["node_count"]) == ("node-a", 2)
    assert (leadership["epoch"], leadership["lease_seconds"], leadership["expired"]) == (
        1,
        3600,
        False,
    )
    assert (leadership["issued_at"], leadership["expires_at"]) == (
        reply["issued_at"],
        reply["expires_at"],
    )
    assert {n["node_id"]: n["role"] for n in leadership["nodes"]} == roles

    # later heartbeats: the chosen node is primary, others (even new ones) secondary
    assert beat(http, "node-a", cid)["role"] == "primary"
    assert beat(http, "node-b", cid)["role"] == "secondary"
    assert beat(http, "node-c", cid)["role"] == "secondary"

    # choosing again bumps the epoch and moves the roles
    again = ok(
        http.post(
            f"/projects/{cid}/leadership/select",
            json={"primary_node_id": "node-b", "lease_seconds": 60},
        )
    )
    assert (again["epoch"], again["lease_seconds"]) == (2, 60)
    assert beat(http, "node-a", cid)["role"] == "secondary"
    assert beat(http, "node-b", cid)["role"] == "primary"


def test_a_short_lease_expires_and_roles_become_unknown(http: httpx.Client) -> None:
    cid = canonical_id(unique("proj"))
    beat(http, "node-a", cid)
    beat(http, "node-b", cid)
    body = {"primary_node_id": "node-a", "lease_seconds": 1}
    chosen = ok(http.post(f"/projects/{cid}/leadership/select", json=body))
    assert chosen["expires_at"] == pytest.approx(chosen["issued_at"] + 1)
    deadline = time.monotonic() + 15
    leadership = ok(http.get(f"/projects/{cid}/leadership"))
    while not leadership["expired"] and time.monotonic() < deadline:
        time.sleep(0.2)
        leadership = ok(http.get(f"/projects/{cid}/leadership"))
    assert leadership["expired"] is True
    assert (leadership["preferred_primary"], leadership["epoch"]) == ("node-a", 1)
    assert {n["role"] for n in leadership["nodes"]} == {"unknown"}
    assert beat(http, "node-a", cid)["role"] == "unknown"
    assert {n["role"] for n in ok(http.get(f"/projects/{cid}/nodes"))} == {"unknown"}
    renewed = ok(
        http.post(f"/projects/{cid}/leadership/select", json=body | {"lease_seconds": 600})
    )
    assert renewed["epoch"] == 2
    assert beat(http, "node-a", cid)["role"] == "primary"


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"primary_node_id": ""},
        {"primary_node_id": "n", "lease_seconds": 0},
        {"primary_node_id": "n", "lease_seconds": 31_536_001},
        {"primary_node_id": "n", "lease_seconds": "forever"},
    ],
)
def test_invalid_selections_are_422_and_change_nothing(http: httpx.Client, body: Any) -> None:
    cid = canonical_id(unique("proj"))
    response = http.post(f"/projects/{cid}/leadership/select", json=body)
    assert response.status_code == 422
    assert ok(http.get(f"/projects/{cid}/leadership"))["epoch"] == 0


@pytest.mark.parametrize(
    "body",
    [
        {"canonical_id": "c"},
        {"node_id": "n"},
        {"node_id": "", "canonical_id": "c"},
        {"node_id": "n", "canonical_id": "a/b"},
        {"node_id": "n", "canonical_id": "c", "obs_count": -1},
        {"node_id": "n", "canonical_id": "c", "obs_count": 2**63},
        {"node_id": "n", "canonical_id": "c", "last_seen": -5},
        {"node_id": "n", "canonical_id": "c", "ip_addrs": "10.0.0.1"},
    ],
)
def test_invalid_heartbeats_are_422(http: httpx.Client, body: Any) -> None:
    assert http.post("/agent/heartbeat", json=body).status_code == 422


def test_heartbeat_projects_are_listed_and_merged(http: httpx.Client) -> None:
    manual, wild = unique("proj"), unique("wild")
    ok(http.post("/projects", json={"name": manual}), 201)
    beat(http, "node-a", canonical_id(manual), project_id=manual)
    beat(http, "node-b", canonical_id(manual))
    beat(http, "node-a", canonical_id(wild), project_id=wild)
    listed = {p["canonical_id"]: p for p in ok(http.get("/projects"))}
    mine = listed[canonical_id(manual)]
    assert (mine["name"], mine["source"], mine["nodes_count"]) == (manual, "manual", 2)
    assert isinstance(mine["last_seen"], float)
    found = listed[canonical_id(wild)]
    assert found == {
        "name": wild,
        "canonical_id": canonical_id(wild),
        "created_at": None,
        "last_seen": found["last_seen"],
        "nodes_count": 1,
        "source": "heartbeat",
    }
    names = [p["name"] for p in ok(http.get("/projects"))]
    assert names.index(manual) < names.index(wild)  # manual projects first


def test_a_heartbeat_brings_its_agent_online(http: httpx.Client) -> None:
    name = unique("worker")
    ok(http.post("/agents", json={"name": name}), 201)
    beat(http, name, canonical_id("any-project"), agent_version="0.4.0")
    [agent] = [a for a in ok(http.get("/agents")) if a["name"] == name]
    assert agent["status"] == "online"
    assert isinstance(agent["last_seen"], float)
    [node] = [
        n
        for n in ok(http.get(f"/projects/{canonical_id('any-project')}/nodes"))
        if n["node_id"] == name
    ]
    assert node["agent_version"] == "0.4.0"
