"""BLOOM_ENV_FILE: the settings file a deployed service reads, refused when others may read it."""

import os
from pathlib import Path

import pytest

from bloom.cli.env_file import EnvFileError, check_private, load_env_file, parse_env_file


def env_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "bloom-runtime.env"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_the_seeds_env_file_reads_as_written() -> None:
    text = """# /etc/bloom-runtime.env
NODE_ENV=production
PORT=5000

export MEMBRIDGE_SERVER_URL=http://127.0.0.1:8000
DATABASE_URL=postgresql://bloom:p@ss$word#1@127.0.0.1/bloom
RUNTIME_API_KEY="quoted value"
MEMBRIDGE_ADMIN_KEY='single'
EMPTY=
"""
    assert parse_env_file(text) == {
        "NODE_ENV": "production",
        "PORT": "5000",
        "MEMBRIDGE_SERVER_URL": "http://127.0.0.1:8000",
        "DATABASE_URL": "postgresql://bloom:p@ss$word#1@127.0.0.1/bloom",  # as written
        "RUNTIME_API_KEY": "quoted value",
        "MEMBRIDGE_ADMIN_KEY": "single",
        "EMPTY": "",
    }


@pytest.mark.parametrize("line", ["JUST_A_NAME", "1ABC=x", "A B=c", "=value"])
def test_a_line_of_another_shape_is_named(line: str) -> None:
    with pytest.raises(EnvFileError, match=r"^f\.env:2: expected KEY=value$"):
        parse_env_file(f"OK=1\n{line}\n", "f.env")


def test_the_file_fills_what_the_environment_lacks(tmp_path: Path) -> None:
    path = env_file(tmp_path, "PORT=5000\nBLOOM_LOG_LEVEL=info\nBLOOM_HOST=127.0.0.1\n")
    environ = {"BLOOM_ENV_FILE": str(path), "BLOOM_LOG_LEVEL": "debug", "BLOOM_HOST": ""}
    assert load_env_file(environ) == path
    assert environ["PORT"] == "5000"
    assert environ["BLOOM_LOG_LEVEL"] == "debug"  # the environment wins
    assert environ["BLOOM_HOST"] == "127.0.0.1"  # an empty value is unset


def test_without_the_setting_nothing_is_read() -> None:
    environ = {"PATH": "/bin"}
    assert load_env_file(environ) is None
    assert environ == {"PATH": "/bin"}


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602, 0o660])
def test_a_file_group_or_others_may_read_or_change_is_refused(tmp_path: Path, mode: int) -> None:
    path = env_file(tmp_path, "RUNTIME_API_KEY=secret\n", mode)
    environ = {"BLOOM_ENV_FILE": str(path)}
    with pytest.raises(EnvFileError) as refused:
        load_env_file(environ)
    assert str(refused.value) == (
        f"{path} holds secrets but group or others may read or change it (mode {mode:04o}): "
        f"chmod 600 {path}"
    )
    assert "RUNTIME_API_KEY" not in environ


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_a_private_file_passes(tmp_path: Path, mode: int) -> None:
    check_private(env_file(tmp_path, "", mode))


def test_a_missing_file_or_a_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(EnvFileError, match=r"nope\.env \(BLOOM_ENV_FILE\) does not exist$"):
        check_private(tmp_path / "nope.env")
    with pytest.raises(EnvFileError, match=r"is not a regular file$"):
        check_private(tmp_path)


def test_a_file_of_a_third_user_is_refused_but_root_reads_the_services(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = env_file(tmp_path, "PORT=5000\n")
    owner = path.stat().st_uid
    if owner == 0:  # run as root: give it to someone else
        os.chown(path, 4242, 4242)
        owner = 4242
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    with pytest.raises(EnvFileError, match=rf"belongs to uid {owner}, neither this service's"):
        check_private(path)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    check_private(path)  # root (bloom db upgrade by an operator) may read the service's file
