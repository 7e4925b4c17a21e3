"""`bloom key …` and `bloom user …`: credentials, made on the runtime's database directly
(`cli/admin.py`). A key is printed once, when it is made; only its hash is kept."""

import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from bloom.cli.admin import on_runtime
from bloom.cli.output import fail
from bloom.domain.identity import Role

if TYPE_CHECKING:
    from bloom.runtime.services.credentials import CredentialService

keys = typer.Typer(no_args_is_help=True)  # their help: bloom.cli.main's
users = typer.Typer(no_args_is_help=True)
T = TypeVar("T")


def _run(action: "Callable[[CredentialService], Awaitable[T]]") -> T:
    """`action` on the runtime's credentials."""
    return on_runtime(lambda container: action(container.credentials))


def _when(ms: int | None) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M") if ms else "-"


@keys.command("create")
def create_key(
    role: Annotated[Role, typer.Option(help="What the key may do.")],
    name: Annotated[str, typer.Option(help="A label, for `bloom key list`.")] = "",
    worker: Annotated[
        str | None, typer.Option(help="For a worker key: the worker it acts as (required).")
    ] = None,
) -> None:
    """Make a key. It is printed once: store it now."""
    made = _run(lambda svc: svc.create_key(name or f"{role} key", role, worker))
    typer.echo(made.secret)
    typer.secho(
        f"{role} key {made.key.id} ({made.key.prefix}…) made; it is not shown again.",
        err=True,
    )


@keys.command("list")
def list_keys() -> None:
    """Every key: id, shown prefix, role, worker, name, made and revoked."""
    found = _run(lambda svc: svc.keys())
    for key in found:
        state = f"revoked {_when(key.revoked_at)}" if key.revoked_at else "active"
        typer.echo(
            f"{key.id}  {key.prefix}…  {key.role:<6}  {key.worker_id or '-':<20}  "
            f"{_when(key.created_at)}  {state}  {key.name}"
        )
    if not found:
        typer.echo("no keys", err=True)


@keys.command("revoke")
def revoke_key(
    ref: Annotated[str, typer.Argument(help="The key's id, or the prefix `bloom key list` shows.")],
) -> None:
    """Revoke a key (servers stop accepting it within 10 seconds)."""
    key = _run(lambda svc: svc.revoke_key(ref))
    typer.echo(f"revoked {key.role} key {key.id} ({key.prefix}…)")


def _password(role: Role, from_stdin: bool) -> str:
    """A person's new password (people are admins or viewers), from stdin or asked twice."""
    if role is Role.WORKER:
        fail("a person is an admin or a viewer; workers use keys")
    if from_stdin:
        return sys.stdin.readline().rstrip("\n")
    entered: str = typer.prompt("Password", hide_input=True, confirmation_prompt=True)
    return entered


@users.command("create")
def create_user(
    username: Annotated[str, typer.Argument(help="The login name.")],
    role: Annotated[Role, typer.Option(help="What the user may do.")] = Role.VIEWER,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the password from standard input.")
    ] = False,
) -> None:
    """Make a user (the password is asked for twice, or read from stdin)."""
    password = _password(role, password_stdin)
    user = _run(lambda svc: svc.create_user(username, password, role))
    typer.echo(f"user {user.username} ({user.role}) made")


@users.command("password")
def set_password(
    username: Annotated[str, typer.Argument(help="The login name.")],
    role: Annotated[Role, typer.Option(help="The user's role from now on.")] = Role.VIEWER,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the password from standard input.")
    ] = False,
) -> None:
    """Set a user's password and role; their open sessions end."""
    password = _password(role, password_stdin)
    user = _run(lambda svc: svc.set_password(username, password, role))
    typer.echo(f"user {user.username} ({user.role}) updated")


@users.command("list")
def list_users() -> None:
    """Every user and role."""
    for user in _run(lambda svc: svc.users()):
        typer.echo(f"{user.username:<24} {user.role:<6} made {_when(user.created_at)}")
