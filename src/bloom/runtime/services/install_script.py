"""The node install script (`GET /api/runtime/agent-install-script`): a POSIX shell script that
installs a worker as a service, writes its env file (mode 0600), starts it and waits until it is
online at the runtime (`install_script.sh`, this module's template).

Unlike the reference, every value placed in the script has passed a strict pattern (the route
checks the query with the patterns below) and is shell-quoted besides; the runtime's URL is the
configured public one, never the caller's Host header; and no secret is embedded unless asked
for: `with_key` makes a worker key for the node (and embeds the node's own agent key).
"""

import functools
import shlex
from dataclasses import dataclass
from importlib import resources

import jinja2

from bloom.domain.audit import AuditAction, worker_audit
from bloom.domain.clock import Clock
from bloom.domain.errors import Conflict, Invalid
from bloom.domain.fleet import WORKER_NAME, node_agent_key
from bloom.domain.identity import Role
from bloom.runtime.services.credentials import CredentialService
from bloom.runtime.storage.repositories import RuntimeDatabase

NODE_ID = WORKER_NAME
"""A node id is its worker's name."""
_SEGMENT = r"[A-Za-z0-9_~-][A-Za-z0-9._~-]*"
URL = rf"^https?://[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*(:[0-9]{{1,5}})?(/{_SEGMENT})*/?$"
"""An http(s) URL of letters, digits and `. _ ~ -` only: no `..` segment, query or userinfo."""
MAX_URL = 512
AGENT_PORT = 8001
"""The reference's default agent port."""
WAIT_SEC = 60
"""How long the script waits for its worker to come online."""
FROM_ENV = '"${{{name}:-}}"'
"""A key the script reads from the environment it runs in, when it embeds none."""


@dataclass(frozen=True)
class InstallRequest:
    """What the caller asked for, each value already matched against its pattern."""

    node_id: str | None
    server_url: str | None
    repo_url: str | None
    port: int = AGENT_PORT
    with_key: bool = False


@dataclass(frozen=True)
class InstallSettings:
    public_url: str | None
    repo_url: str | None
    agent_key: str


class InstallScripts:
    def __init__(
        self,
        db: RuntimeDatabase,
        clock: Clock,
        credentials: CredentialService,
        settings: InstallSettings,
    ):
        self.db = db
        self.clock = clock
        self.credentials = credentials
        self.settings = settings

    async def script(self, request: InstallRequest, actor: str) -> str:
        """The script for `request`; served and audited (never with a key in the entry)."""
        runtime_url = request.server_url or self.settings.public_url
        if not runtime_url:
            raise Conflict(
                "Set BLOOM_PUBLIC_URL (the runtime's URL as nodes reach it) or give server_url"
            )
        repo_url = request.repo_url or self.settings.repo_url
        if not repo_url:
            raise Conflict(
                "Set BLOOM_INSTALL_REPO_URL (the repository to install) or give repo_url"
            )
        worker_key = agent_key = ""
        detail = "Install script served"
        if request.with_key:
            if request.node_id is None:
                raise Invalid("with_key needs a node_id: the key is made for that worker")
            made = await self.credentials.create_key(
                f"install {request.node_id}", Role.WORKER, request.node_id
            )
            worker_key = made.secret
            fleet_key = self.settings.agent_key
            agent_key = node_agent_key(fleet_key, request.node_id) if fleet_key else ""
            detail += f", with a new worker key ({made.key.id})"
        text = render(
            runtime_url=runtime_url.rstrip("/"),
            repo_url=repo_url,
            node_id=request.node_id,
            port=request.port,
            worker_key=worker_key,
            agent_key=agent_key,
        )
        entry = worker_audit(
            AuditAction.INSTALL_SCRIPT_SERVED,
            request.node_id or "(its host name)",
            now=self.clock(),
            actor=actor,
            detail=detail,
        )
        async with self.db.write() as tx:
            await tx.audit.add(entry)
        return text


def render(
    *,
    runtime_url: str,
    repo_url: str,
    node_id: str | None,
    port: int,
    worker_key: str,
    agent_key: str,
) -> str:
    """The script with these values, each shell-quoted (no node id: the node's host name;
    no key: the one in the environment the script runs in, if any)."""
    return _template().render(
        runtime_url=shlex.quote(runtime_url),
        repo_url=shlex.quote(repo_url),
        node_id=shlex.quote(node_id) if node_id else '"$(hostname)"',
        port=port,
        worker_key=shlex.quote(worker_key)
        if worker_key
        else FROM_ENV.format(name="BLOOM_WORKER_API_KEY"),
        agent_key=shlex.quote(agent_key)
        if agent_key
        else FROM_ENV.format(name="MEMBRIDGE_AGENT_KEY"),
        wait_sec=WAIT_SEC,
        name_pattern=NODE_ID.removeprefix("^").removesuffix("$"),
    )


@functools.cache
def _template() -> jinja2.Template:
    text = resources.files("bloom.runtime.services").joinpath("install_script.sh").read_text()
    template: jinja2.Template = jinja2.Template(
        text,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # a shell script: its values are shell-quoted
    )
    return template
