"""Membridge over HTTP: projects and agents (REFERENCE_BEHAVIOUR §8.1), with the reference's bugs
fixed and its validation and error shapes."""

import time
from typing import Any

import httpx
import pytest

from bloom.domain.ids import canonical_id
from tests.process.membridge_api.calls import ok, unique


def test_projects_create_duplicate_list_delete(http: httpx.Client) -> None:
    first, second = unique("proj"), unique("proj")
    before = time.time()
    created = ok(http.post("/projects", json={"name": first}), 201)
    assert created["name"] == first
    assert created["canonical_id"] == canonical_id(first)
    assert len(created["canonical_id"]) == 16
    assert isinstance(created["created_at"], float)
    assert created["created_at"] >= before - 5
    assert (created["last_seen"], created["nodes_count"], created["source"]) == (None, 0, "manual")
    duplicate = http.post("/projects", json={"name": first})
    assert (duplicate.status_code, duplicate.json()) == (
        409,
        {"detail": f"Project '{first}' already exists"},
    )
    ok(http.post("/projects", json={"name": second}), 201)
    listed = {p["name"]: p for p in ok(http.get("/projects"))}
    assert listed[first] == created
    assert listed[second]["source"] == "manual"
    assert http.delete(f"/projects/{first}").status_code == 204
    gone = http.delete(f"/projects/{first}")
    assert (gone.status_code, gone.json()) == (404, {"detail": f"Project '{first}' not found"})
    assert first not in {p["name"] for p in ok(http.get("/projects"))}


@pytest.mark.parametrize(
    "body", [{}, {"name": ""}, {"name": "x" * 129}, {"name": 7}, {"name": None}]
)
def test_invalid_project_bodies_are_422_in_fastapi_shape(http: httpx.Client, body: Any) -> None:
    response = http.post("/projects", json=body)
    assert response.status_code == 422
    errors = response.json()["detail"]
    assert isinstance(errors, list)
    assert errors
    assert errors[0]["loc"] == ["body", "name"]


def test_malformed_json_is_422(http: httpx.Client) -> None:
    response = http.post(
        "/projects", content=b'{"name": ', headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["type"] == "json_invalid"


def test_a_project_name_with_a_slash_can_be_deleted(http: httpx.Client) -> None:
    name = f"team/{unique('proj')}"
    created = ok(http.post("/projects", json={"name": name}), 201)
    assert created["canonical_id"] == canonical_id(name)
    assert http.delete(f"/projects/{name}").status_code == 204
    assert name not in {p["name"] for p in ok(http.get("/projects"))}


def test_the_seed_registration_is_201_and_listed_with_its_capabilities(
    http: httpx.Client,
) -> None:
    name = unique("worker")
    body = {
        "name": name,
        "status": "online",
        "capabilities": {"claude_cli": True, "max_concurrency": 1, "labels": ["production"]},
    }
    agent = ok(http.post("/agents", json=body), 201)
    assert agent == {
        "name": name,
        "url": "",
        "status": "online",
        "capabilities": {"claude_cli": True, "max_concurrency": 1, "labels": ["production"]},
        "registered_at": agent["registered_at"],
        "last_seen": None,
    }
    assert isinstance(agent["registered_at"], float)
    listed = [a for a in ok(http.get("/agents")) if a["name"] == name]
    assert listed == [agent]


def test_the_reference_registration_is_201_with_status_unknown(http: httpx.Client) -> None:
    name = unique("agent")
    agent = ok(http.post("/agents", json={"name": name, "url": "http://10.0.0.7:8001///"}), 201)
    assert (agent["name"], agent["status"], agent["url"]) == (
        name,
        "unknown",
        "http://10.0.0.7:8001",
    )
    assert agent["capabilities"] == {"claude_cli": True, "max_concurrency": 1, "labels": []}


def test_registering_again_is_200_and_keeps_what_is_not_sent(http: httpx.Client) -> None:
    name = unique("worker")
    first = ok(
        http.post(
            "/agents",
            json={
                "name": name,
                "url": "http://10.0.0.5:8001/",
                "status": "online",
                "capabilities": {"max_concurrency": 2, "labels": ["a"]},
            },
        ),
        201,
    )
    again = ok(http.post("/agents", json={"name": name, "capabilities": {"labels": ["b"]}}), 200)
    assert again == first | {
        "capabilities": {"claude_cli": True, "max_concurrency": 2, "labels": ["b"]}
    }
    third = ok(http.post("/agents", json={"name": name, "status": "offline"}), 200)
    assert (third["status"], third["url"], third["registered_at"]) == (
        "offline",
        "http://10.0.0.5:8001",
        first["registered_at"],
    )
    assert [a for a in ok(http.get("/agents")) if a["name"] == name] == [third]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "name"),
        ({"name": ""}, "name"),
        ({"name": "a/b"}, "name"),
        ({"name": "x" * 129}, "name"),
        ({"name": "w", "status": "busy"}, "status"),
        ({"name": "w", "url": "ftp://host"}, "url"),
        ({"name": "w", "url": "not a url"}, "url"),
        ({"name": "w", "capabilities": {"max_concurrency": 0}}, "capabilities"),
        ({"name": "w", "capabilities": {"max_concurrency": 33}}, "capabilities"),
        ({"name": "w", "capabilities": {"labels": "production"}}, "capabilities"),
    ],
)
def test_invalid_agent_bodies_are_422(http: httpx.Client, body: Any, field: str) -> None:
    response = http.post("/agents", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"][1] == field


def test_agents_delete_204_then_404(http: httpx.Client) -> None:
    name = unique("worker")
    ok(http.post("/agents", json={"name": name}), 201)
    assert http.delete(f"/agents/{name}").status_code == 204
    gone = http.delete(f"/agents/{name}")
    assert (gone.status_code, gone.json()) == (404, {"detail": f"Agent '{name}' not found"})
    assert name not in {a["name"] for a in ok(http.get("/agents"))}
