"""The runtime's error answers in its OpenAPI document (see `bloom.web.openapi_errors`)."""

from fastapi import FastAPI

from bloom.runtime.access import RULES, Access
from bloom.runtime.rate_limits import LIMITED_PREFIXES, UNLIMITED
from bloom.web.openapi_errors import ZOD_FLATTENED, Declared, document_errors, message_schema

TASK = "/api/runtime/llm-tasks/{task_id}"
LAPSED = "The task is not in a state for this, or the lease lapsed"
FOREIGN = "The lease is held by another worker than the one named (or the caller's key's)"
WORKER = "/api/runtime/workers/{worker_id}"
AGENT_ACTIONS = (("GET", "health"), ("POST", "update"), ("POST", "restart"), ("POST", "uninstall"))
AGENT_FAILED = "The agent could not be reached, refused, or answered `ok: false`"
PROJECT = "/api/runtime/projects/{project_id}"
ERRORS: Declared = {
    ("POST", "/api/runtime/llm-tasks"): {
        "409": "The idempotency key was used for a different request",
    },
    ("POST", "/api/runtime/llm-tasks/batch"): {
        "409": "An idempotency key was used for a different request: no task was queued",
    },
    ("POST", f"{TASK}/lease"): {
        "409": "The task is not queued, its project's budget is spent, or the worker does not "
        "run Claude CLI tasks",
        "503": "No worker (or not the one named) is online with a free slot",
    },
    ("POST", f"{TASK}/dispatch"): {
        "400": "The worker named has no agent URL",
        "409": "The task is not queued, or its project's budget is spent",
        "502": "The agent could not be reached or refused: the task is queued again, its "
        "attempt not counted (`{dispatched: false, task_id, worker_id, error}`)",
        "503": "No worker with an agent URL (or not the one named) is online with a free slot",
    },
    ("POST", f"{TASK}/heartbeat"): {"403": FOREIGN, "409": LAPSED},
    ("POST", f"{TASK}/complete"): {"403": FOREIGN, "409": LAPSED},
    ("POST", f"{TASK}/events"): {"403": FOREIGN, "409": LAPSED},
    ("POST", f"{TASK}/cancel"): {"409": "The task has ended"},
    ("POST", f"{TASK}/requeue"): {"409": "The task is neither failed nor dead"},
    **{
        (
            "POST" if action != "health" else "GET",
            f"/api/runtime/workers/{{worker_id}}/agent-{action}",
        ): {
            "400": "The worker has no agent URL",
            "404": "No such worker",
            **({} if action == "health" else {"502": AGENT_FAILED}),
        }
        for action in ("health", "update", "restart", "uninstall")
    },
    ("GET", "/api/runtime/agent-install-script"): {
        "400": "A query value does not match its pattern, or with_key without node_id",
        "409": "No BLOOM_PUBLIC_URL (nor server_url), or no BLOOM_INSTALL_REPO_URL (nor repo_url)",
    },
    ("GET", "/api/runtime/usage"): {
        "400": "from or to is neither epoch milliseconds nor ISO 8601, or from is after to",
    },
    ("GET", "/api/runtime/budgets/{project}"): {"404": "No budget for this project"},
    ("PUT", "/api/runtime/budgets/{project}"): {
        "400": "Neither limit given, or a limit out of range",
    },
    ("DELETE", "/api/runtime/budgets/{project}"): {"404": "No budget for this project"},
    ("GET", "/api/runtime/approvals/{approval_id}"): {"404": "No such approval"},
    ("POST", "/api/runtime/approvals/{approval_id}/decision"): {
        "404": "No such approval",
        "409": "The approval is no longer pending (decided, expired, or its task cancelled)",
    },
    ("GET", "/api/runtime/llm-tasks/{task_id}/decisions"): {
        "403": "A worker key names another worker's task",
        "404": "No such task",
    },
    ("POST", "/api/runtime/llm-tasks/{task_id}/decisions"): {
        "403": "A worker key names another worker's task",
        "404": "No such task",
        "409": "The lease is not the task's current one",
    },
    ("GET", "/api/runtime/tool-policies/{project}"): {"404": "No tool policy for this project"},
    ("DELETE", "/api/runtime/tool-policies/{project}"): {"404": "No tool policy for this project"},
    ("GET", WORKER): {"403": "A worker key names another worker than its own"},
    ("POST", f"{WORKER}/approve-url"): {
        "404": "No such worker",
        "409": "No agent URL awaits approval, or another than the one named",
    },
    ("POST", "/api/runtime/projects"): {"409": "A project of this name exists"},
    ("POST", f"{PROJECT}/clone"): {
        "400": "No node named and no primary, or the node's worker has no agent URL",
        "404": "No such project, or no worker of the node's name",
        "502": f"{AGENT_FAILED}: the project and the node are `failed`",
    },
    ("POST", f"{PROJECT}/sync-memory"): {
        "400": "No node named and no primary",
        "502": "Membridge could not be reached or refused, or the sync failed (`ok: false`)",
    },
    ("POST", "/api/runtime/workers/{worker_id}/claim"): {
        "409": "The worker does not run Claude CLI tasks",
    },
    (
        "GET",
        "/api/runtime/workers/{worker_id}/leases/{lease_id}",
    ): {
        "403": "A worker key names another worker than its own",
        "404": "The worker holds no such lease",
        "409": "The lease is no longer active, or no longer holds its task",
    },
    ("POST", "/api/runtime/workers/{worker_id}/complete"): {
        "403": "A worker key names another worker than its own",
        "503": "The artifact store cannot take an output: nothing changed, retry",
    },
}
MEMBRIDGE_PROXY = {
    "502": "Membridge is unreachable, or its answer is not JSON",
    "default": "Membridge's own refusal, its status kept: `Membridge returned <status>: …`",
}


UNAUTHORIZED = "No valid credentials (when the runtime requires keys)"
FORBIDDEN = "The caller's role may not do this, or a browser session sent no CSRF token"
TOO_MANY = "Too many requests from this caller; see Retry-After"


def _with_guard_errors(declared: Declared) -> Declared:
    """`declared`, plus 401 and 403 on every operation that is not public, and 429 on every
    operation that is rate limited (a route's own description of a status wins)."""
    merged = {route: dict(statuses) for route, statuses in declared.items()}
    for route, access in RULES.items():
        statuses = merged.setdefault(route, {})
        if access is not Access.PUBLIC:
            statuses.setdefault("401", UNAUTHORIZED)
            statuses.setdefault("403", FORBIDDEN)
        path = route[1]
        if path.startswith(LIMITED_PREFIXES) and path not in UNLIMITED:
            statuses.setdefault("429", TOO_MANY)
    return merged


def document_runtime_errors(app: FastAPI) -> None:
    document_errors(
        app,
        error=message_schema("error"),
        error_name="Error",
        validation=("ValidationFailure", ZOD_FLATTENED, "400"),
        declared=_with_guard_errors(ERRORS),
        under={"/api/membridge/": MEMBRIDGE_PROXY},
    )
