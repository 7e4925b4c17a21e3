"""Worker settings from the environment (`BLOOM_WORKER_…`; the seed agent's names as aliases)."""

import re
import shutil
import socket
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import NoDecode

from bloom.domain.branch import PLAIN_BRANCH, is_plain_branch
from bloom.domain.fleet import WORKER_ID
from bloom.domain.models import MAX_CLAIM_WAIT_SEC
from bloom.web.settings import ListenerSettings, SettingsError, is_loopback, load_settings
from bloom.worker.agents.environment import listed_patterns


def _env(*names: str) -> AliasChoices:
    return AliasChoices(*names)


def default_worker_name() -> str:
    """This machine's host name, made into a valid worker name."""
    name = re.sub(r"[^A-Za-z0-9._:@-]", "-", socket.gethostname()).strip("-.") or "worker"
    return name[:128]


class WorkerSettings(ListenerSettings):
    """Everything `bloom worker run` reads from its environment (logging, and the agent
    surface's body limit and exposure: the base's)."""

    name: str = Field(
        default_factory=default_worker_name,
        validation_alias=_env("BLOOM_WORKER_NAME", "MEMBRIDGE_NODE_ID"),
        description="The worker's id at the runtime and its agent name at Membridge.",
    )
    runtime_url: str = Field("http://127.0.0.1:5000", validation_alias=_env("BLOOM_RUNTIME_URL"))
    api_key: SecretStr | None = Field(
        None,
        validation_alias=_env("BLOOM_WORKER_API_KEY", "BLOOM_API_KEY", "RUNTIME_API_KEY"),
        description="Sent as X-Runtime-API-Key. Never passed on to Claude.",
    )
    membridge_url: str | None = Field(
        None,
        validation_alias=_env("BLOOM_MEMBRIDGE_URL", "MEMBRIDGE_SERVER_URL"),
        description="When set, the worker registers there too and sends it heartbeats.",
    )
    membridge_admin_key: SecretStr | None = Field(
        None,
        validation_alias=_env(
            "BLOOM_MEMBRIDGE_ADMIN_KEY", "MEMBRIDGE_SERVER_ADMIN_KEY", "MEMBRIDGE_ADMIN_KEY"
        ),
    )
    max_concurrency: int = Field(
        1, ge=1, le=32, validation_alias=_env("BLOOM_WORKER_CONCURRENCY", "MAX_CONCURRENCY")
    )
    labels: list[str] = Field(default_factory=list, validation_alias=_env("BLOOM_WORKER_LABELS"))
    memory_projects: list[str] = Field(
        default_factory=list,
        validation_alias=_env("BLOOM_WORKER_MEMORY_PROJECTS"),
        description="Projects (agent slugs) whose Claude memory the worker syncs by itself, as a "
        'JSON list, e.g. ["mem"]: pulled at start, pushed after each task of the project, '
        "reported in its Membridge heartbeats (docs/memory-sync.md).",
    )

    data_dir: Path = Field(Path(".bloom"), validation_alias=_env("BLOOM_DATA_DIR"))
    work_dir: Path | None = Field(
        None,
        validation_alias=_env("BLOOM_WORKER_WORK_DIR"),
        description="Each task runs in a directory of its own under this one.",
    )
    project_dir: Path | None = Field(
        None,
        validation_alias=_env("BLOOM_WORKER_PROJECT_DIR"),
        description="Where a task's context_hints (relative paths and globs) are looked up.",
    )

    claude_bin: str = Field("claude", validation_alias=_env("BLOOM_CLAUDE_BIN", "CLAUDE_BIN"))
    claude_args: list[str] = Field(
        default_factory=list,
        validation_alias=_env("BLOOM_CLAUDE_ARGS"),
        description='Extra arguments for every run, as a JSON list, e.g. ["--bare"].',
    )
    claude_env: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        validation_alias=_env("BLOOM_CLAUDE_ENV"),
        description="More of the worker's environment for the Claude CLI, beyond the allow-list "
        "(docs/worker.md): names, comma-separated, NAME_* for a prefix. Never the worker's own "
        "secrets.",
    )

    codex_bin: str | None = Field(
        None,
        validation_alias=_env("BLOOM_CODEX_BIN"),
        description="The Codex CLI: a path, or a name on PATH; unset, `codex` on PATH, else the "
        "pinned one in ./.cache/codex-cli (`bloom agents install codex`). Tasks with cli codex "
        "go only to a worker that has it.",
    )
    codex_args: list[str] = Field(
        default_factory=list,
        validation_alias=_env("BLOOM_CODEX_ARGS"),
        description="Extra arguments for every `codex exec`, as a JSON list, e.g. "
        '["-c", "model=\\"gpt-5.1-codex\\""] (docs/agents.md).',
    )
    codex_env: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        validation_alias=_env("BLOOM_CODEX_ENV"),
        description="More of the worker's environment for the Codex CLI, beyond its allow-list "
        "(CODEX_*, OPENAI_*): names, comma-separated, NAME_* for a prefix.",
    )

    gemini_bin: str | None = Field(
        None,
        validation_alias=_env("BLOOM_GEMINI_BIN"),
        description="The Gemini CLI: a path, or a name on PATH; unset, `gemini` on PATH, else the "
        "pinned one in ./.cache/gemini-cli (`bloom agents install gemini`). Tasks with cli "
        "gemini go only to a worker that has it.",
    )
    gemini_args: list[str] = Field(
        default_factory=list,
        validation_alias=_env("BLOOM_GEMINI_ARGS"),
        description="Extra arguments for every `gemini` run, as a JSON list, e.g. "
        '["--model", "gemini-2.5-pro"] (docs/agents.md).',
    )
    gemini_env: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        validation_alias=_env("BLOOM_GEMINI_ENV"),
        description="More of the worker's environment for the Gemini CLI, beyond its allow-list "
        "(GEMINI_*, GOOGLE_GEMINI_BASE_URL, GOOGLE_API_KEY, its Vertex AI switch): names, "
        "comma-separated, NAME_* for a prefix.",
    )

    on_auth_failure: Literal["fail", "wait"] = Field(
        "fail",
        validation_alias=_env("BLOOM_WORKER_ON_AUTH_FAILURE"),
        description="When the Claude CLI cannot authenticate: fail the task at once (fail), or "
        "give it back to the queue without counting the attempt and take no more work until "
        "the worker's credentials change (wait).",
    )

    lease_ttl_sec: int = Field(
        60, ge=5, le=86_400, validation_alias=_env("BLOOM_WORKER_LEASE_TTL_SEC")
    )
    heartbeat_sec: float = Field(
        5.0,
        gt=0,
        validation_alias=_env("BLOOM_WORKER_HEARTBEAT_SEC"),
        description="Lease renewal (and event flush) period while the CLI runs.",
    )
    claim_wait_sec: float = Field(
        25.0, ge=0, le=MAX_CLAIM_WAIT_SEC, validation_alias=_env("BLOOM_WORKER_CLAIM_WAIT_SEC")
    )
    complete_deadline_sec: float = Field(
        600.0,
        gt=0,
        validation_alias=_env("BLOOM_WORKER_COMPLETE_DEADLINE_SEC"),
        description="How long a complete is retried before the result is given up.",
    )
    membridge_heartbeat_sec: float = Field(
        10.0,
        gt=0,
        validation_alias=_env(
            "BLOOM_WORKER_MEMBRIDGE_HEARTBEAT_SEC", "MEMBRIDGE_HEARTBEAT_INTERVAL_SECONDS"
        ),
    )
    drain_timeout_sec: float = Field(
        600.0,
        ge=0,
        validation_alias=_env("BLOOM_WORKER_DRAIN_TIMEOUT_SEC"),
        description="On SIGTERM, how long running tasks may take to finish before they are killed.",
    )

    agent_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        validation_alias=_env("BLOOM_WORKER_AGENT_PORT"),
        description="Also serve the node-agent HTTP surface (/health, /execute-task, /status) "
        "on this port, so the runtime can dispatch to this worker. Unset: pull only.",
    )
    agent_host: str = Field("127.0.0.1", validation_alias=_env("BLOOM_WORKER_AGENT_HOST"))
    claim: bool = Field(
        True,
        validation_alias=_env("BLOOM_WORKER_CLAIM"),
        description="Claim queued tasks; false: run only what is dispatched to the agent surface.",
    )
    agent_url: str | None = Field(
        None,
        validation_alias=_env("BLOOM_WORKER_AGENT_URL"),
        description="The agent's address as the runtime reaches it (default "
        "http://<agent host>:<agent port>): registered as the worker's url.",
    )
    agent_key: SecretStr = Field(
        SecretStr(""),
        validation_alias=_env("BLOOM_AGENT_KEY", "MEMBRIDGE_AGENT_KEY"),
        description="When set, the agent surface refuses requests without it (X-MEMBRIDGE-AGENT).",
    )

    allow_clone: bool = Field(
        False,
        validation_alias=_env("BLOOM_WORKER_ALLOW_CLONE"),
        description="Clone the runtime's managed projects with git: serve the agent's /clone "
        "(under the repositories' base; only with an agent key, else 403), and take tasks with "
        "a workspace (a worktree per branch under the work dir: docs/workspaces.md).",
    )
    workspace_retention_hours: float = Field(
        24.0,
        ge=1,
        le=24 * 365,
        validation_alias=_env("BLOOM_WORKER_WORKSPACE_RETENTION_HOURS"),
        description="A workspace's worktree unused this long is removed (and the least "
        "recently used ones first while free space is short): docs/workspaces.md.",
    )
    workspace_min_free_mb: int = Field(
        1024,
        ge=0,
        validation_alias=_env("BLOOM_WORKER_WORKSPACE_MIN_FREE_MB"),
        description="Free space under the work dir below which worktrees are removed early.",
    )
    git_author: str = Field(
        "BLOOM worker <bloom@localhost>",
        pattern=r"^[^<>\n]+ <[^<>\s]+>$",
        validation_alias=_env("BLOOM_WORKER_GIT_AUTHOR"),
        description='Who a workspace task\'s commits are by: "Name <email>".',
    )
    allow_process_control: bool = Field(
        False,
        validation_alias=_env("BLOOM_WORKER_ALLOW_PROCESS_CONTROL"),
        description="Serve the agent's /restart, /self-update and /uninstall (the runtime's "
        "agent-restart, agent-update, agent-uninstall). Only with an agent key (else 403).",
    )
    checkout: Path | None = Field(
        None,
        validation_alias=_env("BLOOM_WORKER_CHECKOUT"),
        description="The git checkout /self-update pulls and syncs (default: the one this bloom "
        "runs from, when it is a checkout).",
    )
    update_branches: list[str] = Field(
        default_factory=list,
        validation_alias=_env("BLOOM_WORKER_UPDATE_BRANCHES"),
        description="Branches /self-update may be asked to follow besides the one the checkout "
        'has checked out (where the node was installed from), as a JSON list, e.g. ["release"]; '
        "a request naming any other is refused (403).",
    )
    repos_base: Path = Field(
        Path("~/projects"),
        validation_alias=_env("BLOOM_WORKER_REPOS_BASE", "MEMBRIDGE_REPOS_BASE"),
        description="Where /clone checks projects out; no checkout may lie outside it.",
    )

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if not WORKER_ID.match(value):
            raise ValueError(
                "letters, digits and . _ : @ - only, at most 128, not starting with a sign"
            )
        return value

    @field_validator("claude_env", "codex_env", "gemini_env", mode="before")
    @classmethod
    def _claude_env(cls, value: object) -> object:
        return listed_patterns(value) if isinstance(value, str | list | tuple) else value

    @field_validator("update_branches")
    @classmethod
    def _plain_branches(cls, value: list[str]) -> list[str]:
        if bad := [name for name in value if not is_plain_branch(name)]:
            raise ValueError(f"{bad[0]!r} is not {PLAIN_BRANCH}")
        return value

    @property
    def api_key_value(self) -> str:
        return self.api_key.get_secret_value() if self.api_key is not None else ""

    @property
    def membridge_key_value(self) -> str:
        return self.membridge_admin_key.get_secret_value() if self.membridge_admin_key else ""

    @property
    def clone_refused(self) -> str | None:
        """Why the agent's /clone is not served (None: it is)."""
        return self._opt_in_refused(
            self.allow_clone, "Clone", "--allow-clone", "BLOOM_WORKER_ALLOW_CLONE", "runs git"
        )

    @property
    def process_control_refused(self) -> str | None:
        """Why the agent's /restart, /self-update and /uninstall are not served (None: they
        are)."""
        return self._opt_in_refused(
            self.allow_process_control,
            "Process control",
            "--allow-process-control",
            "BLOOM_WORKER_ALLOW_PROCESS_CONTROL",
            "restarts, updates or stops this worker",
        )

    def _opt_in_refused(
        self, allowed: bool, what: str, option: str, env: str, does: str
    ) -> str | None:
        if not allowed:
            return f"{what} is disabled: start the worker with {option} ({env})."
        if not self.agent_key.get_secret_value():
            return f"{what} needs an agent key (BLOOM_AGENT_KEY): it {does} on this machine."
        return None

    @property
    def agent_open_to_network(self) -> bool:
        """The agent surface listens beyond loopback without an agent key: anyone may call it."""
        return (
            self.agent_port is not None
            and not self.agent_key.get_secret_value()
            and not is_loopback(self.agent_host)
        )

    def check_exposure(self) -> None:
        """Refuse to serve the agent surface beyond loopback without an agent key, unless
        `--insecure` (as the servers refuse to listen without theirs)."""
        if self.agent_open_to_network and not self.insecure:
            raise SettingsError(
                f"refusing to serve the agent surface on {self.agent_host} without an agent "
                "key: set BLOOM_AGENT_KEY (or MEMBRIDGE_AGENT_KEY), listen on 127.0.0.1 "
                "(BLOOM_WORKER_AGENT_HOST), or pass --insecure (BLOOM_INSECURE=true) to serve "
                "it to anyone who can reach it"
            )

    @property
    def advertised_agent_url(self) -> str | None:
        """The agent URL registered with the runtime (None: this worker serves no agent)."""
        if self.agent_port is None:
            return None
        return (self.agent_url or f"http://{self.agent_host}:{self.agent_port}").rstrip("/")

    @property
    def resolved_work_dir(self) -> Path:
        return self.work_dir or self.data_dir / "worker" / self.name

    @property
    def serves_workspaces(self) -> bool:
        """Clones allowed and git present: tasks with a workspace may come here."""
        return self.allow_clone and shutil.which("git") is not None

    @property
    def workspaces_dir(self) -> Path:
        return self.resolved_work_dir / "workspaces"

    @property
    def git_author_parts(self) -> tuple[str, str]:
        """`git_author`'s name and email."""
        name, _, email = self.git_author.rpartition(" <")
        return name.strip(), email.rstrip(">")


def load_worker_settings(**overrides: object) -> WorkerSettings:
    return load_settings(WorkerSettings, **overrides)
