"""`bloom --help`, `bloom version` and the help of every command group import none of the
servers, the database, the object stores or the HTTP client: each command's module is imported
when it runs, and imports what it needs when it runs (docs/decisions.md); `bloom task list`
imports the client, and nothing that only printing rows or following a task needs. Checked by
what a fresh interpreter has imported, never by timing."""

import json
import subprocess
import sys

from typer.testing import CliRunner

import bloom
from bloom.cli import main
from tests.support.net import closed_port

HEAVY = (
    "sqlalchemy",
    "fastapi",
    "starlette",
    "bloom.runtime.app",
    "bloom.membridge.app",
    "asyncpg",
    "uvicorn",
    "obstore",
    "aiobotocore",
    "httpx",
)
HEAVY_HELP = {"bench", "deploy"}
"""Their options' defaults and checks come from the servers' settings and the bench itself."""
NOT_BEFORE_AN_ANSWER = (
    "rich.console",
    "rich.table",
    "bloom.cli.task_views",
    "bloom.cli.watch",
    "bloom.domain.models",
    "httpx._main",
    "click",
    "pygments",
)
"""What `bloom task list` needs only once the runtime has answered (rich, for its table), or
never (following a task, the runtime's entities, httpx's own command line)."""

PROBE = """
import contextlib, io, json, sys
from bloom.cli.main import app
heavy, invocations = json.loads(sys.stdin.read())
loaded = {}
for args in invocations:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        app(args)
    loaded[" ".join(args)] = [name for name in heavy if sys.modules.get(name) is not None]
print(json.dumps(loaded))
"""


def imported(names: tuple[str, ...], invocations: list[list[str]]) -> dict[str, list[str]]:
    """Which of `names` one fresh interpreter has imported after each of `invocations`, run in
    turn."""
    probe = subprocess.run(
        [sys.executable, "-c", PROBE],
        input=json.dumps([names, invocations]),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    loaded: dict[str, list[str]] = json.loads(probe.stdout)
    assert list(loaded) == [" ".join(args) for args in invocations]
    return loaded


def test_help_imports_nothing_heavy() -> None:
    groups = [[command.name or "", "--help"] for command in main.BloomGroup.lazy]
    invocations = [
        ["--help"],
        ["version"],
        ["--version"],
        *(args for args in groups if args[0] not in HEAVY_HELP),
    ]
    loaded = imported(HEAVY, invocations)
    assert {args: modules for args, modules in loaded.items() if modules} == {}


def test_task_list_imports_the_client_and_nothing_to_show_before_an_answer() -> None:
    """Against an unreachable runtime: it called it (the client imported), and failed."""
    args = ["task", "list", "--url", f"http://127.0.0.1:{closed_port()}"]
    loaded = imported(("bloom.clients.runtime", *NOT_BEFORE_AN_ANSWER, *HEAVY), [args])
    assert loaded == {" ".join(args): ["bloom.clients.runtime", "httpx"]}


def test_listing_shows_each_command_as_it_is() -> None:
    """The help main.py lists for a command is the one the command, loaded, shows first (its
    first paragraph, its lines joined)."""
    for lazy in main.BloomGroup.lazy:
        loaded = lazy.load()
        assert loaded.name == lazy.name
        assert " ".join((loaded.help or "").split("\n\n")[0].split()) == lazy.help, lazy.name


def test_the_version_is_an_option_and_a_command() -> None:
    for args in (["--version"], ["version"]):
        result = CliRunner().invoke(main.app, args)
        assert (result.exit_code, result.stdout) == (0, f"{bloom.__version__}\n"), args


def test_a_hidden_alias_runs_its_command() -> None:
    result = CliRunner().invoke(main.app, ["artifacts", "--help"])
    assert result.exit_code == 0
    assert "migrate" in result.stdout


def test_bloom_help_does_not_read_package_metadata() -> None:
    """Reading the installed version costs 0.1 s of email parsing: the version is written in
    the package instead (pydantic, which the commands' settings need, reads metadata itself)."""
    probe = (
        "import contextlib, io, sys\n"
        "from bloom.cli.main import app\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    app(['--help'])\n"
        "print('importlib.metadata' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_the_version_written_in_the_package_is_the_installed_one() -> None:
    from importlib.metadata import version

    assert bloom.__version__ == version("bloom-runtime")
