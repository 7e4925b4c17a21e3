"""Who may call which route: one explicit rule per route, checked for every request.

A route without a rule is refused to everyone but still served to no one (403), and the
authorization matrix test fails, so that no route is ever added open by accident. Ownership
(a worker key acts only for its own worker and leases) is checked by the routes themselves.
"""

from enum import Enum

from fastapi import HTTPException, Request
from starlette.applications import Starlette

from bloom.domain.identity import Identity, Kind, Role

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
METRICS_PATH = "/metrics"


class Access(Enum):
    PUBLIC = frozenset[Role]()
    """Anyone, without credentials."""
    READ = frozenset({Role.VIEWER, Role.APPROVER, Role.ADMIN})
    WORKER = frozenset({Role.WORKER, Role.ADMIN})
    READ_OR_WORKER = frozenset({Role.VIEWER, Role.APPROVER, Role.WORKER, Role.ADMIN})
    """Readers, and a worker for what is its own (the route checks which)."""
    DECIDE = frozenset({Role.APPROVER, Role.ADMIN})
    """Approvals' decisions: admins and approvers; never a worker."""
    ADMIN = frozenset({Role.ADMIN})


RT = "/api/runtime"
MB = "/api/membridge"
RULES: dict[tuple[str, str], Access] = {
    ("GET", "/"): Access.READ,
    ("GET", "/api/docs"): Access.PUBLIC,
    ("GET", "/api/openapi.json"): Access.PUBLIC,
    ("GET", "/api/docs/swagger-ui-bundle.js"): Access.PUBLIC,
    ("GET", "/api/docs/swagger-ui.css"): Access.PUBLIC,
    ("GET", "/login"): Access.PUBLIC,
    ("POST", "/login"): Access.PUBLIC,  # checks its own CSRF token
    ("POST", "/logout"): Access.PUBLIC,  # checks its own CSRF token
    ("GET", f"{RT}/session"): Access.PUBLIC,
    ("GET", f"{RT}/health"): Access.PUBLIC,
    ("GET", "/metrics"): Access.READ,  # PUBLIC with BLOOM_METRICS_PUBLIC (see `authorize`)
    ("POST", f"{RT}/test-connection"): Access.PUBLIC,  # the seed's: public, rate limited
    ("GET", f"{RT}/config"): Access.READ,
    ("POST", f"{RT}/config"): Access.ADMIN,
    ("GET", f"{RT}/workers"): Access.READ,
    ("POST", f"{RT}/workers"): Access.WORKER,
    ("GET", f"{RT}/workers/{{worker_id}}"): Access.READ_OR_WORKER,  # a worker: its own
    ("DELETE", f"{RT}/workers/{{worker_id}}"): Access.ADMIN,
    ("POST", f"{RT}/workers/{{worker_id}}/approve-url"): Access.ADMIN,
    ("GET", f"{RT}/workers/{{worker_id}}/agent-health"): Access.ADMIN,
    ("POST", f"{RT}/workers/{{worker_id}}/agent-update"): Access.ADMIN,
    ("POST", f"{RT}/workers/{{worker_id}}/agent-restart"): Access.ADMIN,
    ("POST", f"{RT}/workers/{{worker_id}}/agent-uninstall"): Access.ADMIN,
    ("POST", f"{RT}/workers/{{worker_id}}/claim"): Access.WORKER,
    ("POST", f"{RT}/workers/{{worker_id}}/complete"): Access.WORKER,
    ("GET", f"{RT}/workers/{{worker_id}}/leases/{{lease_id}}"): Access.WORKER,
    ("GET", f"{RT}/agent-install-script"): Access.ADMIN,
    ("POST", f"{RT}/llm-tasks"): Access.ADMIN,
    ("POST", f"{RT}/llm-tasks/batch"): Access.ADMIN,
    ("GET", f"{RT}/llm-tasks"): Access.READ,
    ("GET", f"{RT}/llm-tasks/{{task_id}}"): Access.READ,
    ("GET", f"{RT}/llm-tasks/{{task_id}}/graph"): Access.READ,
    ("GET", f"{RT}/llm-tasks/{{task_id}}/workspace"): Access.READ_OR_WORKER,  # a worker: its own
    ("POST", f"{RT}/llm-tasks/{{task_id}}/cancel"): Access.ADMIN,
    ("POST", f"{RT}/llm-tasks/{{task_id}}/requeue"): Access.ADMIN,
    ("GET", f"{RT}/runs"): Access.READ,
    ("POST", f"{RT}/llm-tasks/{{task_id}}/lease"): Access.ADMIN,
    ("POST", f"{RT}/llm-tasks/{{task_id}}/dispatch"): Access.ADMIN,
    ("POST", f"{RT}/llm-tasks/{{task_id}}/heartbeat"): Access.WORKER,
    ("POST", f"{RT}/llm-tasks/{{task_id}}/complete"): Access.WORKER,
    ("POST", f"{RT}/llm-tasks/{{task_id}}/events"): Access.WORKER,
    ("GET", f"{RT}/llm-tasks/{{task_id}}/events"): Access.READ_OR_WORKER,
    ("GET", f"{RT}/leases"): Access.READ,
    ("GET", f"{RT}/artifacts"): Access.READ,
    ("GET", f"{RT}/artifacts/{{artifact_id}}"): Access.READ,
    ("GET", f"{RT}/artifacts/{{artifact_id}}/content"): Access.READ,
    ("GET", f"{RT}/audit"): Access.READ,
    ("GET", f"{RT}/stats"): Access.READ,
    ("GET", f"{RT}/usage"): Access.READ,
    ("GET", f"{RT}/budgets"): Access.READ,
    ("GET", f"{RT}/budgets/{{project}}"): Access.READ,
    ("PUT", f"{RT}/budgets/{{project}}"): Access.ADMIN,
    ("DELETE", f"{RT}/budgets/{{project}}"): Access.ADMIN,
    ("GET", f"{RT}/approvals"): Access.READ,
    ("GET", f"{RT}/approvals/{{approval_id}}"): Access.READ,
    ("POST", f"{RT}/approvals/{{approval_id}}/decision"): Access.DECIDE,
    ("GET", f"{RT}/llm-tasks/{{task_id}}/decisions"): Access.READ_OR_WORKER,  # a worker: its own
    ("POST", f"{RT}/llm-tasks/{{task_id}}/decisions"): Access.WORKER,  # a run takes them
    ("GET", f"{RT}/tool-policies"): Access.READ,
    ("GET", f"{RT}/tool-policies/{{project}}"): Access.READ,
    ("PUT", f"{RT}/tool-policies/{{project}}"): Access.ADMIN,
    ("DELETE", f"{RT}/tool-policies/{{project}}"): Access.ADMIN,
    ("GET", f"{RT}/projects"): Access.ADMIN,
    ("POST", f"{RT}/projects"): Access.ADMIN,
    ("GET", f"{RT}/projects/{{project_id}}"): Access.ADMIN,
    ("DELETE", f"{RT}/projects/{{project_id}}"): Access.ADMIN,
    ("POST", f"{RT}/projects/{{project_id}}/clone"): Access.ADMIN,
    ("POST", f"{RT}/projects/{{project_id}}/propagate"): Access.ADMIN,
    ("POST", f"{RT}/projects/{{project_id}}/sync-memory"): Access.ADMIN,
    ("GET", f"{RT}/projects/{{project_id}}/node-status"): Access.ADMIN,
    ("GET", f"{MB}/health"): Access.PUBLIC,
    ("GET", f"{MB}/agents"): Access.READ,
    ("POST", f"{MB}/agents"): Access.ADMIN,
    ("DELETE", f"{MB}/agents/{{name}}"): Access.ADMIN,
    ("GET", f"{MB}/projects"): Access.READ,
    ("POST", f"{MB}/projects"): Access.ADMIN,
    ("DELETE", f"{MB}/projects/{{name}}"): Access.ADMIN,
    ("GET", f"{MB}/projects/{{cid}}/nodes"): Access.READ,
    ("GET", f"{MB}/projects/{{cid}}/leadership"): Access.READ,
    ("POST", f"{MB}/projects/{{cid}}/leadership/select"): Access.ADMIN,
    ("GET", f"{MB}/jobs"): Access.READ,
    ("GET", f"{MB}/jobs/{{job_id}}"): Access.READ,
    # The dashboard (runtime/dashboard/): pages for readers, actions for admins.
    ("GET", "/tasks"): Access.READ,
    ("GET", "/tasks/{task_id}"): Access.READ,
    ("GET", "/workers"): Access.READ,
    ("GET", "/approvals"): Access.READ,
    ("POST", "/approvals/{approval_id}/decision"): Access.DECIDE,
    ("GET", "/membridge"): Access.READ,
    ("GET", "/audit"): Access.READ,
    ("GET", "/audit/export.jsonl"): Access.READ,
    ("GET", "/settings"): Access.ADMIN,
    ("GET", "/projects"): Access.ADMIN,
    ("POST", "/tasks"): Access.ADMIN,
    ("POST", "/tasks/{task_id}/cancel"): Access.ADMIN,
    ("POST", "/tasks/{task_id}/requeue"): Access.ADMIN,
    ("POST", "/tasks/{task_id}/again"): Access.ADMIN,
    ("POST", "/tasks/{task_id}/dispatch"): Access.ADMIN,
    ("POST", "/workers"): Access.ADMIN,
    ("POST", "/workers/{worker_id}/remove"): Access.ADMIN,
    ("POST", "/workers/{worker_id}/approve-url"): Access.ADMIN,
    ("POST", "/workers/{worker_id}/agent/{action}"): Access.ADMIN,
    ("POST", "/membridge/config"): Access.ADMIN,
    ("POST", "/membridge/test"): Access.ADMIN,
    ("POST", "/membridge/projects/{cid}/promote"): Access.ADMIN,
    ("POST", "/projects"): Access.ADMIN,
    ("POST", "/projects/{project_id}/clone"): Access.ADMIN,
    ("POST", "/projects/{project_id}/propagate"): Access.ADMIN,
    ("POST", "/projects/{project_id}/remove"): Access.ADMIN,
    ("POST", "/settings/keys"): Access.ADMIN,
    ("POST", "/settings/keys/{key_id}/revoke"): Access.ADMIN,
    ("POST", "/settings/users"): Access.ADMIN,
    ("POST", "/settings/users/{username}/password"): Access.ADMIN,
}


class LoginRequired(Exception):
    """A dashboard page or action asked for without a login: answered by sending the browser to
    the login page, and back to `target` after it."""

    def __init__(self, target: str):
        super().__init__(target)
        self.target = target


class PageRefused(Exception):
    """A dashboard page the caller's role may not see: answered 403 with a page saying so."""


def is_dashboard(request: Request) -> bool:
    """A request of the dashboard's: a page (not the API, not metrics), or one of its actions."""
    path = request.url.path
    if path.startswith("/api/") or path == METRICS_PATH:
        return False
    return request.method in SAFE_METHODS or request.headers.get("hx-request") == "true"


def rule_for(method: str, path_format: str) -> Access | None:
    return RULES.get(("GET" if method == "HEAD" else method, path_format))


async def authorize(request: Request) -> None:
    """A dependency of every route: the caller's identity against the route's rule.

    401 for no (valid) credentials, 403 for a role the rule does not admit, for a browser
    login's state-changing request without its CSRF token, and for a route without a rule.
    """
    route = request.scope.get("route")
    path = getattr(route, "path_format", None)  # the URL built only when there is none
    access = rule_for(request.method, path if path is not None else request.url.path)
    if access is None:
        raise HTTPException(403, "Forbidden: no access rule for this route")
    if access is Access.PUBLIC or (
        getattr(request.app.state, "metrics_public", False) and request.url.path == METRICS_PATH
    ):
        return
    identity: Identity | None = getattr(request.state, "identity", None)
    if identity is None or identity.role is None:
        if is_dashboard(request):
            target = request.headers.get("hx-current-url") or str(request.url)
            raise LoginRequired(target)
        raise HTTPException(401, "Unauthorized")
    if (
        identity.kind is Kind.USER
        and request.method not in SAFE_METHODS
        and not getattr(request.state, "csrf_ok", False)
    ):
        raise HTTPException(403, "Forbidden: CSRF token missing or wrong")
    if identity.role not in access.value:
        if is_dashboard(request) and request.method in SAFE_METHODS:
            raise PageRefused(f"This page is for {' and '.join(sorted(access.value))}s.")
        raise HTTPException(403, f"Forbidden: a {identity.role} may not do this")


def unknown_route_refused(request: Request) -> bool:
    """Whether a request for a path no route serves gets 401 rather than 404: under `/api`,
    without credentials, as in the seed (the paths that exist are not given away)."""
    identity: Identity | None = getattr(request.state, "identity", None)
    anonymous = identity is None or identity.role is None
    return anonymous and "route" not in request.scope and request.url.path.startswith("/api/")


def route_table(app: Starlette) -> list[tuple[str, str]]:
    """Every (method, path) the app serves, as its router sees it, HEAD aside."""
    found: set[tuple[str, str]] = set()
    for route in app.routes:
        # FastAPI ≥ 0.16x keeps included routers as branches that list their effective routes.
        contexts = (
            route.effective_route_contexts()
            if hasattr(route, "effective_route_contexts")
            else [route]
        )
        for context in contexts:
            methods = getattr(context, "methods", None) or ()
            path = getattr(context, "path_format", None)
            found.update((method, path) for method in methods if path and method != "HEAD")
    return sorted(found)
