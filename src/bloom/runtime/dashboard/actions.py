"""What the dashboard's buttons and forms do: thin POST routes over the same services and body
rules as the API, so a refusal reads exactly as the API words it.

They answer htmx: a notice for the page's corner and an `HX-Trigger: bloom:changed` header that
makes the page's live regions refresh (or `HX-Redirect` to a new task). Every one requires the
`HX-Request` header, which no other site can make a browser send without our consent (CORS), on
top of the login's CSRF token that `authorize` checks for a logged-in user: so even in open
development mode (no API key) no cross-site form can act here.
"""

import contextlib
from typing import Annotated, Any, TypeVar
from urllib.parse import quote

from fastapi import APIRouter, Depends, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, ValidationError
from starlette.responses import Response

from bloom.domain.errors import Forbidden, Invalid, NotFound, ServiceError
from bloom.domain.identity import Role
from bloom.domain.states import WorkerStatus
from bloom.runtime.api.deps import Caller
from bloom.runtime.api.project_schemas import CloneBody, CreateProjectBody
from bloom.runtime.api.schemas import (
    ConfigBody,
    CreateTaskBody,
    DecisionBody,
    RegisterWorkerBody,
)
from bloom.runtime.container import Container
from bloom.runtime.dashboard.templating import fragment
from bloom.runtime.http import JSON
from bloom.runtime.services.tasks import NewTask
from bloom.runtime.services.workers import Registration
from bloom.web.forms import read_form

Model = TypeVar("Model", bound=BaseModel)
CHANGED = {"HX-Trigger": "bloom:changed"}


async def _from_page(hx_request: Annotated[str | None, Header()] = None) -> None:
    if hx_request != "true":
        raise Forbidden("Dashboard actions are sent by the dashboard's own pages")


router = APIRouter(include_in_schema=False, dependencies=[Depends(_from_page)])


def _container(request: Request) -> Container:
    built: Container = request.app.state.container
    return built


async def _form(request: Request) -> dict[str, str]:
    form = await read_form(request)
    if form is None:
        raise Invalid("The form could not be read (too large, or not UTF-8)")
    return form


def _parse(model: type[Model], data: dict[str, Any]) -> Model:
    """The API's body rules applied to a form: its 400 answer when they refuse."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:  # located as the API's, so nested fields are named alike
        errors = [error | {"loc": ("body", *error["loc"])} for error in exc.errors()]
        raise RequestValidationError(errors) from None


def _number(form: dict[str, str], name: str, default: int | None) -> int | str | None:
    """A whole number from a form field (`default` when empty); the raw text when it is not one
    (the body rules then refuse it by name)."""
    raw = form.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        return raw


def _decimal(form: dict[str, str], name: str) -> float | str:
    raw = form.get(name, "").strip()
    try:
        return float(raw) if raw else 0
    except ValueError:
        return raw


def _notice(
    message: str, *, kind: str = "ok", headers: dict[str, str] | None = None
) -> HTMLResponse:
    return fragment(
        "notice.html", {"message": message, "kind": kind}, headers={**CHANGED, **(headers or {})}
    )


# ---- tasks ----


@router.post("/tasks")
async def create_task(request: Request, caller: Caller) -> Response:
    form = await _form(request)
    body = _parse(
        CreateTaskBody,
        {
            "prompt": form.get("prompt", ""),
            "context_id": form.get("context_id", "").strip(),
            "agent_slug": form.get("agent_slug", "").strip() or "default",
            "desired_format": form.get("desired_format", "text"),
            "cli": form.get("cli") or "claude",
            "priority": _number(form, "priority", 0),
            "max_attempts": _number(form, "max_attempts", 3),
            "policy": {
                "timeout_sec": _number(form, "timeout_sec", 120),
                "budget": _decimal(form, "budget"),
                "stall_sec": _number(form, "stall_sec", None),  # empty: the runtime's default
                "on_stall": form.get("on_stall") or None,
            },
        },
    )
    container = _container(request)
    task, _ = await container.tasks.create(body.new_task(), caller.actor)
    if form.get("dispatch") == "on":
        # a refusal is in the task's timeline (`dispatch_failed`), which the redirect shows
        with contextlib.suppress(ServiceError):
            await container.dispatcher.dispatch(task.id, actor=caller.actor)
    return _notice(f"Task {task.id[-8:]} queued.", headers={"HX-Redirect": f"/tasks/{task.id}"})


@router.post("/tasks/{task_id}/dispatch")
async def dispatch_task(request: Request, task_id: str, caller: Caller) -> Response:
    sent = await _container(request).dispatcher.dispatch(task_id, actor=caller.actor)
    state = "working on it" if sent.execution is None else "answered"
    return _notice(f"Task {task_id[-8:]} dispatched to {sent.worker_id} ({state}).")


@router.post("/tasks/{task_id}/cancel")
async def cancel_task(request: Request, task_id: str, caller: Caller) -> Response:
    task = await _container(request).tasks.cancel(task_id, caller.actor)
    said = (
        "cancel requested" if task.cancel_requested and task.status != "cancelled" else "cancelled"
    )
    return _notice(f"Task {task.id[-8:]}: {said}.")


@router.post("/tasks/{task_id}/requeue")
async def requeue_task(request: Request, task_id: str, caller: Caller) -> Response:
    task = await _container(request).tasks.requeue(task_id, caller.actor)
    return _notice(f"Task {task.id[-8:]} is queued again.")


@router.post("/tasks/{task_id}/again")
async def run_again(request: Request, task_id: str, caller: Caller) -> Response:
    """A new task with the same prompt, context, agent and policy (the old one stays as it is)."""
    tasks = _container(request).tasks
    old = await tasks.get(task_id)
    task, _ = await tasks.create(
        NewTask(
            context_id=old.context_id,
            agent_slug=old.agent_slug,
            prompt=old.prompt,
            context_hints=list(old.context_hints),
            policy=dict(old.policy),
            desired_format=old.desired_format,
            max_attempts=old.max_attempts,
            priority=old.priority,
            cli=old.cli,
        ),
        caller.actor,
    )
    return _notice(f"Task {task.id[-8:]} queued.", headers={"HX-Redirect": f"/tasks/{task.id}"})


# ---- approvals ----


@router.post("/approvals/{approval_id}/decision")
async def decide_approval(request: Request, approval_id: str, caller: Caller) -> Response:
    form = await _form(request)
    body = _parse(
        DecisionBody,
        {
            "decision": form.get("decision", ""),
            "note": form.get("note", "").strip() or None,
            "remember": form.get("remember") == "true",
        },
    )
    decided = await _container(request).approvals.decide(
        approval_id, body.decision, actor=caller.name, note=body.note, remember=body.remember
    )
    return _notice(
        f"{decided.tool_name} call {decided.status}: task {decided.task_id[-8:]} resumes."
    )


# ---- workers ----


@router.post("/workers")
async def register_worker(request: Request, caller: Caller) -> Response:
    """The reference's "Register node": known by name and agent URL, status unknown until it
    reports, so nothing is leased to it before then."""
    form = await _form(request)
    body = _parse(
        RegisterWorkerBody,
        {"name": form.get("name", "").strip(), "url": form.get("url", "").strip() or None},
    )
    worker, created = await _container(request).workers.register(
        Registration(name=body.name, url=body.url, status=WorkerStatus.UNKNOWN), caller.actor
    )
    return _notice(f"Worker {worker.id} {'registered' if created else 'updated'}.")


@router.post("/workers/{worker_id}/remove")
async def remove_worker(request: Request, worker_id: str, caller: Caller) -> Response:
    await _container(request).workers.remove(worker_id, caller.actor)
    return _notice(f"Worker {worker_id} removed; its leases ended.")


@router.post("/workers/{worker_id}/approve-url")
async def approve_worker_url(request: Request, worker_id: str, caller: Caller) -> Response:
    """The agent URL shown (proposed by the worker or Membridge) becomes the one called."""
    form = await _form(request)
    worker = await _container(request).workers.approve_url(
        worker_id, form.get("url") or None, caller.actor
    )
    return _notice(f"{worker.id}: agent URL {worker.url} approved.")


@router.post("/workers/{worker_id}/agent/{action}")
async def manage_agent(request: Request, worker_id: str, action: str, caller: Caller) -> Response:
    """The reference UI's Health, Update, Restart and Uninstall of a node's agent."""
    agents = _container(request).agents
    if action == "health":
        health = await agents.health(worker_id)
        if not health.get("reachable"):
            return _notice(f"{worker_id}: not reachable ({health.get('error')})", kind="error")
        version, host = health.get("version") or "?", health.get("hostname") or "?"
        return _notice(f"{worker_id}: agent {version} on {host}, healthy.")
    if action == "update":
        await agents.update(worker_id, None, caller.actor)
    elif action == "restart":
        await agents.restart(worker_id, caller.actor)
    elif action == "uninstall":
        await agents.uninstall(worker_id, caller.actor)
    else:
        raise NotFound(f"No agent action '{action}'")
    return _notice(f"{worker_id}: agent {action} done.")


# ---- membridge ----


@router.post("/membridge/config")
async def save_membridge(request: Request, caller: Caller) -> Response:
    form = await _form(request)
    config = _container(request).config
    current = await config.get()
    body = _parse(
        ConfigBody,
        {
            "membridge_server_url": form.get("membridge_server_url", "").strip()
            or current.membridge_server_url,
            "admin_key": form.get("admin_key", ""),
        },
    )
    url = str(body.membridge_server_url).rstrip("/")
    saved = await config.update(url, body.admin_key, caller.actor)
    return _notice(f"Saved: Membridge at {saved.membridge_server_url}.")


@router.post("/membridge/test")
async def test_membridge(request: Request, caller: Caller) -> Response:
    tested = await _container(request).membridge.test_connection(actor=caller.name)
    if not tested.get("connected"):
        return _notice(f"Not connected: {tested.get('error') or 'no answer'}", kind="error")
    health = tested.get("health")
    version = health.get("version") if isinstance(health, dict) else None
    return _notice(f"Connected: Membridge {version or '(version not given)'}.")


@router.post("/membridge/projects/{cid}/promote")
async def promote_primary(request: Request, cid: str, caller: Caller) -> Response:
    form = await _form(request)
    body = {
        "primary_node_id": form.get("primary_node_id", "").strip(),
        "lease_seconds": _number(form, "lease_seconds", 3600),
    }
    path = f"/projects/{quote(cid, safe='')}/leadership/select"
    answer = await _container(request).membridge.select_leadership(path, cid, body, caller.actor)
    if answer.status >= 400:
        return JSON(answer.body, status_code=answer.status)
    return _notice(f"{body['primary_node_id']} is now the primary of {cid}.")


# ---- managed projects ----


@router.post("/projects")
async def create_project(request: Request, caller: Caller) -> Response:
    form = await _form(request)
    body = _parse(
        CreateProjectBody,
        {
            "name": form.get("name", "").strip(),
            "repo_url": form.get("repo_url", "").strip(),
            "target_path": form.get("target_path", "").strip() or None,
            "primary_node_id": form.get("primary_node_id", "").strip() or None,
        },
    )
    project = await _container(request).projects.create(body.new_project(), caller.actor)
    return _notice(f"Project {project.name} created.")


@router.post("/projects/{project_id}/clone")
async def clone_project(request: Request, project_id: str, caller: Caller) -> Response:
    form = await _form(request)
    body = _parse(CloneBody, {"node_id": form.get("node_id", "").strip() or None})
    answer = await _container(request).projects.clone(project_id, body.node_id, caller.actor)
    return _notice(f"Cloned on {answer['node']}.")


@router.post("/projects/{project_id}/propagate")
async def propagate_project(request: Request, project_id: str, caller: Caller) -> Response:
    answer = await _container(request).projects.propagate(project_id, caller.actor)
    results = answer.get("results")
    if results is None:
        return _notice(str(answer["message"]))
    cloned = sum(1 for result in results if result["status"] == "cloned")
    said = f"Propagated: cloned on {cloned} of {len(results)} nodes."
    return _notice(said, kind="ok" if answer["status"] == "synced" else "error")


@router.post("/projects/{project_id}/remove")
async def remove_project(request: Request, project_id: str, caller: Caller) -> Response:
    await _container(request).projects.delete(project_id, caller.actor)
    return _notice("Project deleted (the nodes' checkouts stay).")


# ---- settings (admin: the route rules say so) ----


@router.post("/settings/keys")
async def create_key(request: Request) -> Response:
    form = await _form(request)
    role = form.get("role", "")
    if role not in set(Role):
        raise Invalid("role: must be viewer, worker or admin")
    name = form.get("name", "").strip()
    if not name or len(name) > 200:
        raise Invalid("name: required, at most 200 characters")
    made = await _container(request).credentials.create_key(
        name, Role(role), form.get("worker_id", "").strip() or None
    )
    return fragment("parts/new_key.html", {"made": made}, headers=CHANGED)


@router.post("/settings/keys/{key_id}/revoke")
async def revoke_key(request: Request, key_id: str) -> Response:
    key = await _container(request).credentials.revoke_key(key_id)
    return _notice(f"Key {key.name} ({key.prefix}…) revoked.")


@router.post("/settings/users")
async def create_user(request: Request) -> Response:
    form = await _form(request)
    role = form.get("role", "viewer")
    username = form.get("username", "").strip()
    if role not in set(Role) or role == Role.WORKER:
        raise Invalid("role: must be viewer or admin")
    if not username or len(username) > 100:
        raise Invalid("username: required, at most 100 characters")
    user = await _container(request).credentials.create_user(
        username, form.get("password", ""), Role(role)
    )
    return _notice(f"User {user.username} created ({user.role}).")


@router.post("/settings/users/{username}/password")
async def set_password(request: Request, username: str) -> Response:
    form = await _form(request)
    role = form.get("role", "viewer")
    if role not in set(Role) or role == Role.WORKER:
        raise Invalid("role: must be viewer or admin")
    user = await _container(request).credentials.set_password(
        username, form.get("password", ""), Role(role)
    )
    return _notice(f"User {user.username}: password set; their other logins have ended.")
