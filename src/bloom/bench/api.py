"""The runtime calls the bench makes (as simulated workers, or reading a real one's tasks), counting
every unexpected reply as an error."""

from dataclasses import dataclass, field
from typing import Any

import orjson

from bloom.bench.http import Endpoint, HttpConnection, Response

API = "/api/runtime"
MAX_SAMPLES = 5
RECENT_LEASES = 10
TASK_AGENT = TASK_PROMPT = "bench"
SUCCESS = {"status": "success", "output": "bench", "metrics": {"duration_ms": 1}}


@dataclass(slots=True)
class Tally:
    """Requests sent and errors seen by all simulated workers of one run."""

    errors: int = 0
    samples: list[str] = field(default_factory=list)
    connections: list[HttpConnection] = field(default_factory=list)

    @property
    def requests(self) -> int:
        return sum(conn.requests for conn in self.connections)

    def error(self, what: str, response: Response) -> None:
        body = response.body[:200].decode(errors="replace")
        self.note(f"{what}: HTTP {response.status} {body}")

    def note(self, error: str) -> None:
        """Count an error; the first few are kept to be shown."""
        self.errors += 1
        if len(self.samples) < MAX_SAMPLES:
            self.samples.append(error)


@dataclass(frozen=True, slots=True)
class Claim:
    task_id: str
    lease_id: str


class RuntimeApi:
    """One simulated worker's connection to the runtime."""

    def __init__(self, endpoint: Endpoint, tally: Tally):
        self.conn = HttpConnection(endpoint)
        self.tally = tally
        tally.connections.append(self.conn)

    async def health(self) -> dict[str, Any]:
        response = await self.conn.request("GET", f"{API}/health")
        if response.status != 200:
            self.tally.error("health", response)
            return {}
        return dict(response.json())

    async def register_worker(self, name: str, slots: int = 1) -> bool:
        body = {"name": name, "capabilities": {"claude_cli": True, "max_concurrency": slots}}
        return self._ok("register", await self.conn.request("POST", f"{API}/workers", body))

    async def remove_worker(self, name: str) -> bool:
        response = await self.conn.request("DELETE", f"{API}/workers/{name}")
        return self._ok("remove worker", response)

    async def create_task(self, context_id: str) -> str | None:
        """Queue a small task; its id, or None on an error."""
        body = {"context_id": context_id, "agent_slug": TASK_AGENT, "prompt": TASK_PROMPT}
        response = await self.conn.request("POST", f"{API}/llm-tasks", body)
        if not self._ok("create", response):
            return None
        return str(response.json()["id"])

    async def create_tasks(self, context_ids: list[str]) -> list[str]:
        """Queue small tasks in one batch; their ids, or none on an error."""
        body = {
            "tasks": [
                {"context_id": context_id, "agent_slug": TASK_AGENT, "prompt": TASK_PROMPT}
                for context_id in context_ids
            ]
        }
        response = await self.conn.request("POST", f"{API}/llm-tasks/batch", body)
        if not self._ok("create batch", response):
            return []
        return [str(task["id"]) for task in response.json()["tasks"]]

    async def create_graph(self, run_id: str, after: list[tuple[int, ...]]) -> list[str]:
        """Queue a graph in one batch (docs/graphs.md): task `n` waits for the tasks that
        `after[n]` numbers (earlier ones, named by their refs), each in a context of its own;
        their ids, in that order, or [] on an error."""
        tasks: list[dict[str, Any]] = [
            {"context_id": f"{run_id}-{n}", "agent_slug": TASK_AGENT, "prompt": TASK_PROMPT,
             "ref": f"t{n}"}
            | ({"depends_on": [f"t{m}" for m in dependencies]} if dependencies else {})
            for n, dependencies in enumerate(after)
        ]  # fmt: skip
        response = await self.conn.request("POST", f"{API}/llm-tasks/batch", {"tasks": tasks})
        if not self._ok("create graph", response):
            return []
        return [str(task["id"]) for task in response.json()["tasks"]]

    async def claim(self, worker: str, wait_seconds: float) -> Claim | None:
        """Long-poll for a task: the claim, or None when none came (204) or on an error."""
        body = {"wait_seconds": wait_seconds}
        response = await self.conn.request("POST", f"{API}/workers/{worker}/claim", body)
        if response.status == 204 or not self._ok("claim", response):
            return None
        reply = response.json()
        return Claim(str(reply["task"]["id"]), str(reply["lease"]["id"]))

    async def heartbeat(self, claim: Claim) -> bool:
        path = f"{API}/llm-tasks/{claim.task_id}/heartbeat"
        return self._ok(
            "heartbeat", await self.conn.request("POST", path, {"lease_id": claim.lease_id})
        )

    async def complete(self, claim: Claim) -> bool:
        return await self.complete_status(claim) < 300

    async def complete_status(self, claim: Claim) -> int:
        """Complete the attempt; the answer's HTTP status (a refusal is counted as an error)."""
        path = f"{API}/llm-tasks/{claim.task_id}/complete"
        body = SUCCESS | {"lease_id": claim.lease_id}
        response = await self.conn.request("POST", path, body)
        self._ok("complete", response)
        return response.status

    async def complete_and_claim(
        self, claim: Claim, wait_seconds: float
    ) -> tuple[bool, Claim | None]:
        """Complete, claiming the worker's next task in the same call: (completed, next)."""
        path = f"{API}/llm-tasks/{claim.task_id}/complete"
        body = SUCCESS | {"lease_id": claim.lease_id, "claim_next": {"wait_seconds": wait_seconds}}
        response = await self.conn.request("POST", path, body)
        if not self._ok("complete", response):
            return False, None
        reply = response.json()
        if reply["next_error"] is not None:
            self.tally.error("claim after complete", response)
        following = reply["next"]
        if following is None:
            return True, None
        return True, Claim(str(following["task"]["id"]), str(following["lease"]["id"]))

    async def complete_many(
        self, worker: str, claims: list[Claim], max_tasks: int
    ) -> tuple[list[str], list[Claim]]:
        """Complete the worker's attempts in one call, claiming up to `max_tasks` next ones
        without waiting: (the tasks completed, the next claims)."""
        body = {
            "completes": [
                SUCCESS | {"task_id": claim.task_id, "lease_id": claim.lease_id} for claim in claims
            ],
            "claim_next": {"wait_seconds": 0, "max_tasks": max_tasks},
        }
        response = await self.conn.request("POST", f"{API}/workers/{worker}/complete", body)
        if not self._ok("complete many", response):
            return [], []
        reply = response.json()
        refused = [end for end in reply["completed"] if end["error"] is not None]
        if refused or reply["next_error"] is not None:
            self.tally.error("complete many", response)
        completed = [str(end["task_id"]) for end in reply["completed"] if end["error"] is None]
        following = [
            Claim(str(grant["task"]["id"]), str(grant["lease"]["id"])) for grant in reply["next"]
        ]
        return completed, following

    async def task_counts(self) -> dict[str, int]:
        """The overview's tasks per status (`GET /stats`, from the kept counts); {} on an
        error."""
        response = await self.conn.request("GET", f"{API}/stats")
        if not self._ok("stats", response):
            return {}
        return {str(status): int(n) for status, n in response.json()["tasks"]["by_status"].items()}

    async def task_events(self, task_id: str) -> list[dict[str, Any]]:
        """Follow a task's events until it ends: each event as the stream sends it, then the
        end (`{"status": …}`); [] on an error."""
        response = await self.conn.request("GET", f"{API}/llm-tasks/{task_id}/events")
        if not self._ok("events", response):
            return []
        return [
            orjson.loads(line.removeprefix(b"data: "))
            for line in response.body.splitlines()
            if line.startswith(b"data: ")
        ]

    async def lease(self, lease_id: str) -> dict[str, Any] | None:
        """One of the newest leases, as `GET /leases` lists it; None when not among them."""
        response = await self.conn.request("GET", f"{API}/leases?limit={RECENT_LEASES}")
        if not self._ok("leases", response):
            return None
        return next((lease for lease in response.json() if lease["id"] == lease_id), None)

    def close(self) -> None:
        self.conn.close()

    def _ok(self, what: str, response: Response) -> bool:
        if 200 <= response.status < 300:
            return True
        self.tally.error(what, response)
        return False
