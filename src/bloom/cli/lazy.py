"""Commands whose modules are imported only when they run.

`bloom --help` lists every command, and `bloom task …` imports `bloom.cli.task`, never the
modules of the servers, the database or the other commands: every process starts in a fraction
of the time the whole CLI would take to import (docs/decisions.md).

Help is click's plain text, its words wrapped whole: rich's option tables cut long option and
variable names mid-word at 80 columns. Usage errors stay rich's boxes (wrapped by words).
"""

import importlib
from typing import Any, ClassVar

import typer
from typer import _click as click  # the click that Typer's groups are built on (its own copy)
from typer.core import TyperCommand, TyperGroup


class LazyCommand(TyperCommand):
    """A command's name and help in its group's listing, standing in for `module:attribute` (a
    Typer app, or a command's function) until it runs. A Typer app's help is this one."""

    def __init__(self, name: str, target: str, help: str, hidden: bool = False) -> None:
        super().__init__(name, help=help, hidden=hidden)
        self.target = target

    def load(self) -> click.Command:
        """The real command: its module imported, made a click command as `add_typer` (a Typer
        app) or `command` (a function) makes it."""
        module, attribute = self.target.split(":")
        target = getattr(importlib.import_module(module), attribute)
        name = self.name or ""
        holder = typer.Typer(add_completion=False)
        if isinstance(target, typer.Typer):
            holder.add_typer(target, name=name, help=self.help)
        else:
            holder.command(name)(target)
        return plain_help(typer.main.get_group(holder).commands[name])


class LazyGroup(TyperGroup):
    """A Typer group that lists `lazy` after its own commands and loads one when it runs."""

    lazy: ClassVar[tuple[LazyCommand, ...]] = ()

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        for command in self.lazy:
            self.add_command(command)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        click.Command.format_help(self, ctx, formatter)  # click's plain help, not rich's

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if isinstance(command, LazyCommand):
            command = command.load()
        return name, command, rest


def plain_help(command: click.Command) -> click.Command:
    """`command`, and every command under it, with click's plain help."""
    if isinstance(command, TyperCommand | TyperGroup):
        command.rich_markup_mode = None
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            plain_help(sub)
    return command
