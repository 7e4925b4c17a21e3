"""Membridge's pure rules and settings: canonical ids, roles over time, the project listing,
and how the environment is read. No I/O."""

import pytest

from bloom.domain.ids import canonical_id
from bloom.membridge.models import HeartbeatProject, Leadership, Project
from bloom.membridge.rules import (
    ProjectEntry,
    Role,
    expires_at,
    in_force,
    project_listing,
    role_of,
)
from bloom.membridge.settings import load_membridge_settings
from bloom.web.settings import SettingsError

T0 = 1_800_000_000_000


def choice(primary: str = "node-a", lease_seconds: int = 60, issued_at: int = T0) -> Leadership:
    return Leadership(
        canonical_id="cid",
        primary_node_id=primary,
        epoch=1,
        lease_seconds=lease_seconds,
        issued_at=issued_at,
        expires_at=expires_at(issued_at, lease_seconds),
    )


def test_canonical_id_is_the_first_16_hex_digits_of_the_utf8_sha256() -> None:
    assert canonical_id("garden-seedling") == "aeeafec3a5b5710f"  # the reference's test value
    assert canonical_id("проєкт") == "6f32d62e597a7c81"
    assert canonical_id("a/b") == "c14cddc033f64b9d"


def test_no_choice_means_every_role_is_unknown() -> None:
    assert role_of("node-a", None, T0) is Role.UNKNOWN
    assert not in_force(None, T0)


def test_a_choice_in_force_makes_one_primary_and_the_rest_secondary() -> None:
    chosen = choice("node-a")
    assert expires_at(T0, 60) == T0 + 60_000
    assert role_of("node-a", chosen, T0) is Role.PRIMARY
    assert role_of("node-b", chosen, T0) is Role.SECONDARY
    assert role_of("node-a", chosen, T0 + 59_999) is Role.PRIMARY
    assert role_of("node-b", chosen, T0 + 59_999) is Role.SECONDARY


def test_at_and_after_expiry_every_role_is_unknown() -> None:
    chosen = choice("node-a")
    for now in (T0 + 60_000, T0 + 60_001, T0 + 10**9):
        assert not in_force(chosen, now)
        assert role_of("node-a", chosen, now) is Role.UNKNOWN
        assert role_of("node-b", chosen, now) is Role.UNKNOWN


def test_project_listing_puts_manual_projects_first_and_merges_heartbeat_records() -> None:
    manual = [
        Project("alpha", canonical_id("alpha"), T0),
        Project("beta", canonical_id("beta"), T0),
    ]
    reported = [
        HeartbeatProject(canonical_id("alpha"), "alpha-as-reported", "node-1", T0 + 5),
        HeartbeatProject(canonical_id("gamma"), "gamma", "node-2", T0 + 7),
    ]
    counts = {canonical_id("alpha"): 2, canonical_id("gamma"): 1, "unrelated": 4}
    assert project_listing(manual, reported, counts) == [
        ProjectEntry("alpha", canonical_id("alpha"), T0, T0 + 5, 2, "manual"),
        ProjectEntry("beta", canonical_id("beta"), T0, None, 0, "manual"),
        ProjectEntry("gamma", canonical_id("gamma"), None, T0 + 7, 1, "heartbeat"),
    ]


def test_project_listing_of_nothing_is_empty() -> None:
    assert project_listing([], [], {}) == []


MEMBRIDGE_VARS = (
    "BLOOM_MEMBRIDGE_ADMIN_KEY",
    "MEMBRIDGE_ADMIN_KEY",
    "BLOOM_MEMBRIDGE_DEV",
    "MEMBRIDGE_DEV",
    "BLOOM_DATA_DIR",
    "MEMBRIDGE_DATA_DIR",
    "BLOOM_MEMBRIDGE_DATABASE_URL",
    "BLOOM_MEMBRIDGE_HOST",
    "BLOOM_MEMBRIDGE_PORT",
    "BLOOM_LOG_LEVEL",
)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in MEMBRIDGE_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_defaults(clean_env: pytest.MonkeyPatch) -> None:
    settings = load_membridge_settings()
    assert (settings.host, settings.port, str(settings.data_dir)) == ("127.0.0.1", 8000, ".bloom")
    assert settings.database_url is None
    assert settings.admin_key_value == ""
    assert settings.dev is False
    with pytest.raises(SettingsError, match=r"MEMBRIDGE_ADMIN_KEY.*MEMBRIDGE_DEV=1"):
        settings.check_auth()


def test_the_reference_names_are_read(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("MEMBRIDGE_ADMIN_KEY", "seed-key")
    clean_env.setenv("MEMBRIDGE_DATA_DIR", "/srv/membridge")
    clean_env.setenv("MEMBRIDGE_DEV", "1")
    settings = load_membridge_settings()
    assert settings.admin_key_value == "seed-key"
    assert str(settings.data_dir) == "/srv/membridge"
    assert settings.dev is True
    assert not settings.auth_disabled  # a key is configured: it is enforced
    settings.check_auth()


def test_bloom_names_win_over_the_reference_names(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("MEMBRIDGE_ADMIN_KEY", "seed-key")
    clean_env.setenv("BLOOM_MEMBRIDGE_ADMIN_KEY", "bloom-key")
    clean_env.setenv("MEMBRIDGE_DATA_DIR", "/srv/seed")
    clean_env.setenv("BLOOM_DATA_DIR", "/srv/bloom")
    clean_env.setenv("BLOOM_MEMBRIDGE_PORT", "8123")
    clean_env.setenv("BLOOM_MEMBRIDGE_HOST", "0.0.0.0")
    settings = load_membridge_settings()
    assert settings.admin_key_value == "bloom-key"
    assert str(settings.data_dir) == "/srv/bloom"
    assert (settings.host, settings.port) == ("0.0.0.0", 8123)


def test_dev_mode_without_a_key_disables_auth(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("MEMBRIDGE_DEV", "1")
    clean_env.setenv("MEMBRIDGE_ADMIN_KEY", "")  # empty counts as unset
    settings = load_membridge_settings()
    assert settings.auth_disabled
    settings.check_auth()


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("BLOOM_MEMBRIDGE_PORT", "eighty", "BLOOM_MEMBRIDGE_PORT: Input should be a valid integer"),
        ("BLOOM_MEMBRIDGE_PORT", "70000", "BLOOM_MEMBRIDGE_PORT: Input should be less than"),
        ("MEMBRIDGE_DEV", "maybe", "BLOOM_MEMBRIDGE_DEV or MEMBRIDGE_DEV: Input should be"),
        ("BLOOM_LOG_LEVEL", "loud", "BLOOM_LOG_LEVEL: Value error, must be one of"),
    ],
)
def test_bad_values_are_named_in_one_line(
    clean_env: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    clean_env.setenv(name, value)
    with pytest.raises(SettingsError) as raised:
        load_membridge_settings()
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)
