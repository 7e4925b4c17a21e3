"""The node install script (the reference's `agent-install-script`, its query names kept)."""

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import PlainTextResponse

from bloom.runtime.api.deps import AppContainer, Caller
from bloom.runtime.services.install_script import (
    AGENT_PORT,
    MAX_URL,
    NODE_ID,
    URL,
    InstallRequest,
)

router = APIRouter(prefix="/api/runtime", tags=["workers"])

Url = Annotated[str | None, Query(pattern=URL, max_length=MAX_URL)]


@router.get(
    "/agent-install-script",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {}}}},
    summary="A shell script that installs a worker on a node as a service",
)
async def install_script(
    container: AppContainer,
    caller: Caller,
    node_id: Annotated[str | None, Query(pattern=NODE_ID)] = None,
    server_url: Url = None,
    repo_url: Url = None,
    port: Annotated[int, Query(ge=1, le=65535)] = AGENT_PORT,
    with_key: bool = False,
) -> PlainTextResponse:
    """`curl -fsSL -H "X-Runtime-API-Key: …" "<this URL>?node_id=<name>" | sudo sh`. The
    runtime's URL is BLOOM_PUBLIC_URL (or `server_url`), never this request's Host; no key is
    embedded unless `with_key=true`, which makes a worker key for `node_id`."""
    ask = InstallRequest(node_id, server_url, repo_url, port, with_key)
    text = await container.install_scripts.script(ask, actor=caller.name)
    return PlainTextResponse(text, headers={"Cache-Control": "no-store"})
