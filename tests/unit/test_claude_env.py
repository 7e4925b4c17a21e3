"""What the Claude CLI is given of the worker's environment: the allow-list, a provider's
variables only while its switch is on, the operator's names, never the worker's own secrets."""

import pytest

from bloom.web.settings import SettingsError
from bloom.worker.agents.claude.env import child_environment
from bloom.worker.agents.environment import listed_patterns, without_secrets
from bloom.worker.settings import load_worker_settings

NEEDED = {
    "PATH": "/usr/bin",
    "HOME": "/var/lib/bloom-worker",
    "USER": "bloom-worker",
    "LANG": "C.UTF-8",
    "LC_CTYPE": "C.UTF-8",
    "TERM": "dumb",
    "HTTPS_PROXY": "http://proxy:3128",
    "no_proxy": "localhost",
    "NODE_EXTRA_CA_CERTS": "/etc/ssl/bloom/fullchain.pem",
    "XDG_CONFIG_HOME": "/var/lib/bloom-worker/.config",
    "ANTHROPIC_API_KEY": "sk-ant-own",
    "ANTHROPIC_BASE_URL": "http://127.0.0.1:9999",
    "CLAUDE_CODE_OAUTH_TOKEN": "oauth",
    "CLAUDE_CONFIG_DIR": "/var/lib/bloom-worker/.claude",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_PROMPT_CACHING_HAIKU": "1",
}
SECRETS = {
    "RUNTIME_API_KEY": "rt",
    "DATABASE_URL": "postgresql://bloom:pw@db/bloom",
    "BLOOM_WORKER_API_KEY": "bloom_worker_x",
    "BLOOM_SECRET_KEY": "cookie-key",
    "MEMBRIDGE_ADMIN_KEY": "mb-admin",
    "MEMBRIDGE_AGENT_KEY": "mb-agent",
}
OTHERS = {
    "MINIO_SECRET_KEY": "minio",
    "AWS_SECRET_ACCESS_KEY": "aws",
    "AWS_REGION": "eu-west-1",
    "GOOGLE_APPLICATION_CREDENTIALS": "/gcp.json",
    "CLOUD_ML_REGION": "us-east5",
    "AZURE_CLIENT_SECRET": "azure",
    "REDIS_URL": "redis://:pw@redis:6379/0",
    "PGPASSWORD": "pw",
    "CLAUDE_PROJECT_ID": "the-worker-own",
    "SSH_AUTH_SOCK": "/tmp/agent.sock",
}


def test_the_cli_gets_what_it_needs_and_nothing_else() -> None:
    environ = NEEDED | SECRETS | OTHERS
    assert child_environment(environ, "default") == NEEDED
    assert child_environment(environ, "reviewer") == NEEDED | {"CLAUDE_PROJECT_ID": "reviewer"}


@pytest.mark.parametrize(
    ("switch", "given"),
    [
        ("CLAUDE_CODE_USE_BEDROCK", {"AWS_SECRET_ACCESS_KEY", "AWS_REGION"}),
        ("CLAUDE_CODE_USE_VERTEX", {"GOOGLE_APPLICATION_CREDENTIALS", "CLOUD_ML_REGION"}),
        ("CLAUDE_CODE_USE_FOUNDRY", {"AZURE_CLIENT_SECRET"}),
    ],
)
def test_a_providers_variables_only_while_its_switch_is_on(switch: str, given: set[str]) -> None:
    environ = NEEDED | SECRETS | OTHERS
    for on in ("1", "true", " TRUE ", "yes", "on"):
        child = child_environment(environ | {switch: on}, "default")
        assert set(child) == set(NEEDED) | {switch} | given
    for off in ("0", "false", "", "no"):
        assert set(child_environment(environ | {switch: off}, "default")) == set(NEEDED) | {switch}


def test_the_operator_lists_more_but_never_the_workers_secrets() -> None:
    environ = NEEDED | SECRETS | OTHERS
    listed = ("REDIS_URL", "AWS_*", "BLOOM*", "MEMBRIDGE*", "DATA*", "RUNTIME*")
    child = child_environment(environ, "default", listed)
    assert child == NEEDED | {
        "REDIS_URL": OTHERS["REDIS_URL"],
        "AWS_SECRET_ACCESS_KEY": "aws",
        "AWS_REGION": "eu-west-1",
    }
    assert without_secrets(environ) == NEEDED | OTHERS


def test_listed_patterns_are_names_or_prefixes_never_the_workers_secrets() -> None:
    assert listed_patterns(" REDIS_URL, ACME_*,,GH_TOKEN ") == ("REDIS_URL", "ACME_*", "GH_TOKEN")
    assert listed_patterns("") == ()
    assert listed_patterns(["A", "B_*"]) == ("A", "B_*")
    for bad in ("*", "A B", "A*B", "1A", "A-B", "$HOME"):
        with pytest.raises(ValueError, match="not a variable name"):
            listed_patterns(bad)
    for secret in ("BLOOM_WORKER_API_KEY", "BLOOM_*", "MEMBRIDGE_*", "RUNTIME_API_KEY"):
        with pytest.raises(ValueError, match="the worker's own secrets"):
            listed_patterns(f"REDIS_URL,{secret}")


def test_bloom_claude_env_is_read_and_refused_with_its_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BLOOM_CLAUDE_ENV", "GH_TOKEN, ACME_*")
    assert load_worker_settings().claude_env == ("GH_TOKEN", "ACME_*")
    monkeypatch.setenv("BLOOM_CLAUDE_ENV", "GH_TOKEN,DATABASE_URL")
    with pytest.raises(SettingsError, match=r"BLOOM_CLAUDE_ENV: .*DATABASE_URL names the worker"):
        load_worker_settings()
    monkeypatch.delenv("BLOOM_CLAUDE_ENV")
    assert load_worker_settings().claude_env == ()
