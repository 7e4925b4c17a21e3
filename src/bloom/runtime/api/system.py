"""Health and configuration."""

from fastapi import APIRouter

from bloom import __version__
from bloom.runtime.api.deps import AppContainer, Caller, Config
from bloom.runtime.api.replies import Health
from bloom.runtime.api.schemas import ConfigBody
from bloom.runtime.http import JSON
from bloom.runtime.services.config import RuntimeConfig

router = APIRouter(prefix="/api/runtime", tags=["system"])


INSECURE_WARNING = (
    "No API key, and listening beyond loopback or behind a reverse proxy (--insecure): anyone "
    "who can reach this server can use every endpoint."
)


@router.get(
    "/health",
    response_model=Health,
    summary="Liveness, storage kind and reachability, uptime, version",
    responses={503: {"model": Health, "description": "The database cannot be reached"}},
)
async def health(container: AppContainer) -> JSON:
    """200 while the database answers; 503 with `database: "unreachable"` while it does not,
    so that a load balancer routes away from this replica."""
    reachable = await container.db.reachable()
    answer = {
        "status": "ok" if reachable else "unavailable",
        "service": "bloom-runtime",
        "version": __version__,
        "uptime": round(container.uptime, 3),
        "storage": container.db.kind,
        "database": "ok" if reachable else "unreachable",
        "membridge": container.membridge_client.state.as_json(),
    }
    if container.settings.serving_insecure:
        answer |= {"insecure": True, "warning": INSECURE_WARNING}
    return JSON(answer, status_code=200 if reachable else 503)


@router.get("/config", response_model=RuntimeConfig, summary="Membridge settings (key masked)")
async def get_config(config: Config) -> JSON:
    return JSON(await config.get())


@router.post("/config", response_model=RuntimeConfig, summary="Set the Membridge URL and key")
async def set_config(body: ConfigBody, config: Config, caller: Caller) -> JSON:
    url = str(body.membridge_server_url).rstrip("/")
    return JSON(await config.update(url, body.admin_key, caller.actor))
