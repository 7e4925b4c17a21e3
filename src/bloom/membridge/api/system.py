"""Health: public, and what the runtime's test-connection reads."""

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from bloom import __version__
from bloom.domain.errors import Unavailable
from bloom.membridge import API_VERSION, SERVICE_NAME
from bloom.membridge.api.deps import AppContainer
from bloom.membridge.api.schemas import Health, Unreachable

router = APIRouter(tags=["system"])
INSECURE_WARNING = (
    "No admin key, and listening beyond loopback (--insecure): anyone who can reach this "
    "server can use every endpoint."
)


@router.get(
    "/health",
    response_model=Health,
    response_model_exclude_none=True,
    summary="Liveness, API version, and how many projects and agents there are (no key needed)",
    responses={503: {"model": Unreachable, "description": "The database cannot be reached"}},
)
async def health(container: AppContainer) -> Health | JSONResponse:
    try:
        projects, agents = await container.projects.counts()
    except Unavailable:
        down = Unreachable(service=SERVICE_NAME, version=API_VERSION)
        return JSONResponse(down.model_dump(), status_code=503)
    return Health(
        service=SERVICE_NAME,
        version=API_VERSION,
        projects=projects,
        agents=agents,
        bloom_version=__version__,
        auth="disabled" if container.settings.auth_disabled else None,
        insecure=True if container.settings.serving_insecure else None,
        warning=INSECURE_WARNING if container.settings.serving_insecure else None,
    )
