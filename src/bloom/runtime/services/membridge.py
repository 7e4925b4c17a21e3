"""The runtime's dealings with Membridge on behalf of its users: testing the connection, and
forwarding the control plane's API (with the admin key added here, never shown to the caller)."""

from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from bloom.clients.membridge import MembridgeClient, MembridgeUnavailable
from bloom.domain.audit import AuditAction, config_audit, project_audit
from bloom.domain.clock import Clock
from bloom.domain.errors import BadGateway
from bloom.runtime.services.config import ConfigService
from bloom.runtime.storage.repositories import RuntimeDatabase


@dataclass(frozen=True, slots=True)
class Forwarded:
    """Membridge's answer as the proxy returns it: its status, and its JSON body (or an error)."""

    status: int
    body: Any


class MembridgeService:
    def __init__(
        self, db: RuntimeDatabase, client: MembridgeClient, config: ConfigService, clock: Clock
    ):
        self.db = db
        self.client = client
        self.config = config
        self.clock = clock

    async def test_connection(self, *, actor: str) -> dict[str, Any]:
        """The seed's test: one retry, always an answer, `connected` persisted for the config; a
        success audited as `actor`'s (the caller's name: an anonymous caller's is its address)."""
        try:
            response = await self.client.request("GET", "/health", retries=1)
            health = _json(response) if response.is_success else None
        except (MembridgeUnavailable, BadGateway) as exc:
            await self.config.record_connection(False)
            return {"connected": False, "error": str(exc) or "Connection failed"}
        if health is None:
            await self.config.record_connection(False)
            return {"connected": False, "error": f"HTTP {response.status_code}"}
        await self.config.record_connection(True)
        async with self.db.write() as tx:
            await tx.audit.add(
                config_audit(
                    AuditAction.CONNECTION_TEST,
                    now=self.clock(),
                    actor=actor,
                    detail=f"Connection OK: {orjson.dumps(health).decode()}",
                )
            )
        return {"connected": True, "health": health}

    async def forward(
        self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None
    ) -> Forwarded:
        """Call Membridge and hand back its answer: success as it is, an error status with
        `{"error": …}`. Unreachable, or not JSON: BadGateway (502)."""
        try:
            response = await self.client.request(method, path, json=json, params=params)
        except MembridgeUnavailable as exc:
            raise BadGateway(f"Membridge unreachable: {exc}") from None
        if response.status_code == 204:
            return Forwarded(204, None)
        body = _json(response)
        if response.is_success:
            return Forwarded(response.status_code, body)
        detail = body.get("detail") if isinstance(body, dict) else None
        message = f"Membridge returned {response.status_code}"
        return Forwarded(
            response.status_code, {"error": f"{message}: {detail}" if detail else message}
        )

    async def select_leadership(
        self, path: str, canonical_id: str, body: dict[str, Any], actor: str | None = None
    ) -> Forwarded:
        """Forward a primary selection; a successful one is audited."""
        forwarded = await self.forward("POST", path, json=body)
        if 200 <= forwarded.status < 300:
            async with self.db.write() as tx:
                await tx.audit.add(
                    project_audit(
                        AuditAction.LEADERSHIP_PROMOTE,
                        canonical_id,
                        now=self.clock(),
                        actor=actor or "admin",
                        detail=f"Promoted primary to {body.get('primary_node_id') or 'unknown'} "
                        f"for project {canonical_id}",
                    )
                )
        return forwarded


def _json(response: httpx.Response) -> Any:
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError:
        raise BadGateway(
            f"Membridge answered {response.status_code} with a body that is not JSON"
        ) from None
