"""The deployment files: the env examples list every setting (seed names first, secrets blank),
and rendering fills every template for a host with values that agree with the code."""

import re
from pathlib import Path, PurePosixPath

import pytest
from pydantic import AliasChoices, SecretStr
from pydantic_settings import BaseSettings

from bloom.cli.env_file import parse_env_file
from bloom.deploy.render import (
    MAX_BODY_BYTES,
    PROXY_READ_TIMEOUT_SEC,
    RUNTIME_ENV_EXAMPLE,
    WORKER_ENV_EXAMPLE,
    Host,
    Output,
    env_names,
    example_text,
    fill_env,
    http2_directive,
    nginx_site,
    parse_nginx_version,
    render,
    write_tree,
)
from bloom.domain.models import MAX_CLAIM_WAIT_SEC
from bloom.membridge.settings import MembridgeSettings
from bloom.runtime.settings import RuntimeSettings
from bloom.web.settings import ServerSettings
from bloom.worker.settings import WorkerSettings

SEED_NAMES = [
    "NODE_ENV",
    "PORT",
    "MEMBRIDGE_SERVER_URL",
    "MEMBRIDGE_ADMIN_KEY",
    "DATABASE_URL",
    "RUNTIME_API_KEY",
]
"""The seeds' /etc/bloom-runtime.env (seed 001, section B)."""
EXAMPLES: dict[str, list[type[BaseSettings]]] = {
    RUNTIME_ENV_EXAMPLE: [RuntimeSettings, MembridgeSettings],
    WORKER_ENV_EXAMPLE: [WorkerSettings],
}
NOT_SETTINGS = {WORKER_ENV_EXAMPLE: {"ANTHROPIC_API_KEY", "GEMINI_API_KEY"}}
"""Names an example lists that no settings class reads: Claude's and Gemini's own keys, for
their CLIs."""
REPO_DEPLOY = Path(__file__).parents[2] / "deploy"


def field_names(kind: type[BaseSettings]) -> dict[str, list[str]]:
    """Each setting of `kind` and the environment names it is read from."""
    names: dict[str, list[str]] = {}
    for field, info in kind.model_fields.items():
        alias = info.validation_alias
        assert isinstance(alias, AliasChoices), f"{kind.__name__}.{field} has no env names"
        names[field] = [str(choice) for choice in alias.choices]
    return names


def host(**overrides: object) -> Host:
    values: dict[str, object] = {
        "domain": "bloom.example.org",
        "user": "bloom",
        "init": "openrc",
        "bloom_bin": PurePosixPath("/opt/bloom/.venv/bin/bloom"),
    }
    return Host(**(values | overrides))  # type: ignore[arg-type]


@pytest.mark.parametrize("example", list(EXAMPLES))
def test_every_setting_is_in_its_env_example(example: str) -> None:
    listed = set(env_names(example_text(example)))
    missing = [
        f"{kind.__name__}.{field} ({' or '.join(names)})"
        for kind in EXAMPLES[example]
        for field, names in field_names(kind).items()
        if not listed & set(names)
    ]
    assert not missing, f"add to deploy/{example}: {missing}"


@pytest.mark.parametrize("example", list(EXAMPLES))
def test_every_name_in_an_env_example_is_read_once(example: str) -> None:
    names = env_names(example_text(example))
    known = {n for kind in EXAMPLES[example] for ns in field_names(kind).values() for n in ns}
    assert [n for n in names if n not in known | NOT_SETTINGS.get(example, set())] == []
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_the_seeds_names_come_first() -> None:
    assert env_names(example_text(RUNTIME_ENV_EXAMPLE))[: len(SEED_NAMES)] == SEED_NAMES


@pytest.mark.parametrize("example", list(EXAMPLES))
def test_secrets_are_blank_in_the_examples(example: str) -> None:
    values = parse_env_file(example_text(example))
    secret_names = {
        name
        for kind in EXAMPLES[example]
        for field, names in field_names(kind).items()
        if _is_secret(kind, field)
        for name in names
    } | NOT_SETTINGS.get(example, set())
    assert {name: values[name] for name in secret_names if values.get(name)} == {}


def _is_secret(kind: type[BaseSettings], field: str) -> bool:
    annotation = str(kind.model_fields[field].annotation)
    return "SecretStr" in annotation or kind.model_fields[field].annotation is SecretStr


@pytest.mark.parametrize("example", list(EXAMPLES))
def test_the_examples_values_are_valid_settings(
    example: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in parse_env_file(example_text(example)).items():
        monkeypatch.setenv(name, value)
    for kind in EXAMPLES[example]:
        kind()  # raises on a value it cannot read
    if example == RUNTIME_ENV_EXAMPLE:
        runtime = RuntimeSettings()
        assert [str(n) for n in runtime.trusted_proxies] == ["127.0.0.1/32", "::1/128"]
        assert (runtime.host, runtime.port) == ("127.0.0.1", 5000)
        assert str(runtime.data_dir) == "/var/lib/bloom"


def test_the_repository_deploy_dir_is_the_package_files() -> None:
    assert (REPO_DEPLOY / RUNTIME_ENV_EXAMPLE).read_text() == example_text(RUNTIME_ENV_EXAMPLE)


@pytest.mark.parametrize("init", ["openrc", "systemd"])
def test_render_fills_every_file_for_the_host(init: str) -> None:
    secrets = iter(["admin-key-1", "api-key-2"])
    outputs = {str(o.path): o for o in render(host(init=init), lambda: next(secrets))}
    services = (
        ["/etc/init.d/bloom-runtime", "/etc/init.d/bloom-membridge", "/etc/init.d/bloom-worker"]
        if init == "openrc"
        else [f"/etc/systemd/system/bloom-{s}.service" for s in ("runtime", "membridge", "worker")]
    )
    nginx = "/etc/nginx/" + ("http.d" if init == "openrc" else "conf.d") + "/bloom-runtime.conf"
    scripts = ["bloom-self-signed-cert", "bloom-certbot-hook", "bloom-backup", "bloom-restore"]
    assert sorted(outputs) == sorted(
        [nginx, *services, "/etc/logrotate.d/bloom", "/etc/bloom-runtime.env"]
        + ["/etc/bloom-worker.env"]
        + [f"/usr/local/sbin/{s}" for s in scripts]
    )
    for output in outputs.values():
        assert "{{" not in output.text, output.path
        assert "{%" not in output.text, output.path
    for service in services:
        assert "/opt/bloom/.venv/bin/bloom" in outputs[service].text
    assert {p: o.mode for p, o in outputs.items() if o.mode != 0o644} == {
        **dict.fromkeys(services if init == "openrc" else [], 0o755),
        **{f"/usr/local/sbin/{s}": 0o755 for s in scripts},
        "/etc/bloom-runtime.env": 0o600,
        "/etc/bloom-worker.env": 0o600,
    }
    runtime_env = parse_env_file(outputs["/etc/bloom-runtime.env"].text)
    worker_env = parse_env_file(outputs["/etc/bloom-worker.env"].text)
    assert runtime_env["MEMBRIDGE_ADMIN_KEY"] == worker_env["MEMBRIDGE_ADMIN_KEY"] == "admin-key-1"
    assert runtime_env["RUNTIME_API_KEY"] == "api-key-2"
    assert "RUNTIME_API_KEY" not in worker_env
    assert "DATABASE_URL" not in worker_env
    # The runtime reads its file itself; the worker's is root's, read by the service manager.
    assert (outputs["/etc/bloom-runtime.env"].owner, outputs["/etc/bloom-worker.env"].owner) == (
        "bloom",
        "root",
    )
    assert outputs["/etc/bloom-runtime.env"].keep
    assert outputs["/etc/bloom-worker.env"].keep
    worker = outputs[services[2]].text
    if init == "systemd":
        assert "\nEnvironmentFile=/etc/bloom-worker.env\n" in worker
        assert "\nExecStart=/bin/sh -c 'if [ -r /etc/bloom-worker.env ]; then " in worker
        assert "BLOOM_ENV_FILE" not in worker
    else:
        assert 'export_settings "$BLOOM_ENV_FILE" || return 1' in worker
        assert "supervise_daemon_args" not in worker  # the worker reads no file itself


def test_the_nginx_site_agrees_with_the_code() -> None:
    site = nginx_site(host())
    assert f"client_max_body_size {ServerSettings.model_fields['max_body_bytes'].default};" in site
    assert MAX_BODY_BYTES == 5 * 1024 * 1024
    timeouts = [int(t) for t in re.findall(r"proxy_read_timeout (\d+)s;", site)]
    assert PROXY_READ_TIMEOUT_SEC in timeouts
    assert min(timeouts) > MAX_CLAIM_WAIT_SEC  # no claim outlives the proxy's patience
    events = site[site.index("location ~ ^/api/runtime/llm-tasks/") :]
    events = events[: events.index("}")]
    assert "proxy_buffering off;" in events
    assert "ssl_protocols TLSv1.2 TLSv1.3;" in site
    assert 'add_header Strict-Transport-Security "max-age=63072000" always;' in site
    assert "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;" in site
    assert "proxy_set_header X-Forwarded-Proto $scheme;" in site
    assert "return 301 https://bloom.example.org$request_uri;" in site


def test_the_nginx_site_for_a_test_host() -> None:
    site = nginx_site(host(listen=("127.0.0.1:",), http_port=8080, https_port=8443))
    assert re.findall(r"listen (\S+)", site) == ["127.0.0.1:8080", "127.0.0.1:8443"]
    assert "return 301 https://bloom.example.org:8443$request_uri;" in site
    assert "listen 127.0.0.1:8443 ssl http2 default_server;" in site
    modern = nginx_site(host(http2_directive=True))
    assert "listen 443 ssl default_server;" in modern
    assert "http2 on;" in modern


@pytest.mark.parametrize(
    ("answer", "version", "directive"),
    [
        ("nginx version: nginx/1.22.1", (1, 22, 1), False),
        ("nginx version: nginx/1.25.1", (1, 25, 1), True),
        ("nginx version: nginx/1.28.2", (1, 28, 2), True),
        ("command not found", None, False),
    ],
)
def test_the_http2_directive_follows_nginx_s_version(
    answer: str, version: tuple[int, ...] | None, directive: bool
) -> None:
    assert parse_nginx_version(answer) == version
    assert http2_directive(version) is directive


def test_fill_env_sets_lines_set_or_commented_and_refuses_unknown_names() -> None:
    text = "A=1\n# B=2\n#C=3\n"
    assert fill_env(text, {"A": "x", "B": "y", "C": "z"}) == "A=x\nB=y\nC=z\n"
    with pytest.raises(ValueError, match="D is not in the env file"):
        fill_env(text, {"D": "1"})


def test_write_tree_refuses_to_overwrite_and_never_touches_an_env_file(tmp_path: Path) -> None:
    site = Output(PurePosixPath("/etc/nginx/conf.d/site.conf"), "new site\n", 0o644)
    env = Output(
        PurePosixPath("/etc/bloom-runtime.env"), "RUNTIME_API_KEY=new\n", 0o600, None, True
    )
    first = write_tree([site, env], tmp_path)
    assert [w.status for w in first] == ["written", "written"]
    assert (tmp_path / "etc/bloom-runtime.env").stat().st_mode & 0o777 == 0o600
    assert [w.status for w in write_tree([site, env], tmp_path)] == ["same", "kept"]
    changed = Output(site.path, "changed site\n", 0o644)
    with pytest.raises(FileExistsError, match=r"would overwrite .*site\.conf"):
        write_tree([changed, env], tmp_path)
    (tmp_path / "etc/bloom-runtime.env").write_text("RUNTIME_API_KEY=the host's\n")
    forced = write_tree([changed, env], tmp_path, force=True)
    assert [w.status for w in forced] == ["written", "kept"]
    assert (tmp_path / "etc/nginx/conf.d/site.conf").read_text() == "changed site\n"
    assert (tmp_path / "etc/bloom-runtime.env").read_text() == "RUNTIME_API_KEY=the host's\n"
