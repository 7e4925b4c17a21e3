"""Telling people a call waits for them: each approval asked for is POSTed, once delivered, to
the webhook an admin configured (BLOOM_APPROVALS_WEBHOOK_URL), so that a chat channel or a phone
hears of it (docs/approvals.md).

The delivery is durable: the approval's row says when to try (`notify_at`, set in the complete's
transaction), so a restart loses none; a failure (no answer, a non-2xx, a redirect, which is
never followed) is tried again with backoff, up to `MAX_ATTEMPTS`. The body is JSON, signed:
`X-Bloom-Signature: sha256=<hex HMAC-SHA256 of the body with the secret>`. The webhook's
address must resolve to public addresses only, unless BLOOM_APPROVALS_WEBHOOK_ALLOW_PRIVATE:
the runtime never becomes a way into its own network.
"""

import asyncio
import hashlib
import hmac
import ipaddress
import json
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import structlog

from bloom.domain.approvals import Approval
from bloom.domain.clock import Clock
from bloom.runtime.storage.repositories import RuntimeDatabase

log = structlog.get_logger(__name__)
MAX_ATTEMPTS = 8
BACKOFF_BASE_MS = 5_000
BACKOFF_MAX_MS = 15 * 60_000
BATCH = 20
TIMEOUT_SEC = 10.0
SIGNATURE_HEADER = "X-Bloom-Signature"
EVENT = "approval_requested"


class Refused(Exception):
    """The webhook's address may not be called (a private address, a bad URL)."""


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    url: str
    secret: str
    allow_private: bool = False
    public_url: str = ""
    """The dashboard's base URL, for the links in the body."""


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def backoff_ms(attempts: int) -> int:
    """The wait before the attempt that follows `attempts` failed ones."""
    return int(min(BACKOFF_BASE_MS * 2 ** max(attempts - 1, 0), BACKOFF_MAX_MS))


def body_of(approval: Approval, public_url: str) -> bytes:
    base = public_url.rstrip("/")
    payload: dict[str, Any] = {
        "event": EVENT,
        "approval": approval.to_json(),
        "task_url": f"{base}/tasks/{approval.task_id}" if base else None,
        "approvals_url": f"{base}/approvals" if base else None,
    }
    return json.dumps(payload, separators=(",", ":")).encode()


async def check_address(url: str, allow_private: bool) -> None:
    """Refused unless `url` is http(s) and its host resolves to public addresses only (or
    private ones are allowed)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Refused(f"not an http(s) URL: {url!r}")
    if allow_private:
        return
    try:
        found = await asyncio.get_running_loop().getaddrinfo(
            parts.hostname, parts.port, type=socket.SOCK_STREAM
        )
    except OSError as exc:
        raise Refused(f"{parts.hostname} does not resolve: {exc}") from None
    for *_, address in found:
        ip = ipaddress.ip_address(address[0])
        if not ip.is_global:
            raise Refused(
                f"{parts.hostname} resolves to {ip}, not a public address "
                "(BLOOM_APPROVALS_WEBHOOK_ALLOW_PRIVATE allows it)"
            )


class ApprovalWebhook:
    """Delivers what is due, a batch per step (a periodic loop runs it)."""

    def __init__(self, db: RuntimeDatabase, clock: Clock, settings: WebhookSettings):
        self.db = db
        self.clock = clock
        self.settings = settings
        self.client = httpx.AsyncClient(follow_redirects=False, timeout=TIMEOUT_SEC)

    async def step(self) -> int:
        """Try each due delivery once; how many were delivered."""
        async with self.db.read() as tx:
            due = await tx.approvals.to_notify(self.clock(), BATCH)
        delivered = 0
        for approval, attempts in due:
            problem = await self._send(approval)
            attempts += 1
            now = self.clock()
            if problem is None:
                delivered += 1
                at = None
            elif attempts >= MAX_ATTEMPTS:
                log.error("approval_webhook_given_up", approval_id=approval.id, error=problem)
                at = None
            else:
                log.warning("approval_webhook_failed", approval_id=approval.id, error=problem)
                at = now + backoff_ms(attempts)
            async with self.db.write() as tx:
                await tx.approvals.notify_later(approval.id, at, attempts)
        return delivered

    async def _send(self, approval: Approval) -> str | None:
        """None once delivered (a 2xx answer), else what went wrong."""
        body = body_of(approval, self.settings.public_url)
        headers = {
            "Content-Type": "application/json",
            "X-Bloom-Event": EVENT,
            "X-Bloom-Delivery": approval.id,
            SIGNATURE_HEADER: signature(self.settings.secret, body),
        }
        try:
            await check_address(self.settings.url, self.settings.allow_private)
            answer = await self.client.post(self.settings.url, content=body, headers=headers)
        except Refused as exc:
            return str(exc)
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        if 200 <= answer.status_code < 300:
            return None
        return f"answered {answer.status_code}"

    async def close(self) -> None:
        await self.client.aclose()
