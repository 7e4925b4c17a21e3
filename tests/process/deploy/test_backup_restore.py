"""The restore drill of docs/backup.md, for real: a runtime on PostgreSQL with its artifacts in
an S3 bucket (moto's server) and Membridge on SQLite, both configured by the rendered env file;
work done through the API (tasks completed with output, the Membridge key saved encrypted, a
viewer key, the audit exported to the bucket). `bloom-backup` takes it all; then the disaster:
the database dropped, the data dir, the env files and the bucket gone. `bloom-restore` puts
the backup back, the servers start, and everything reads as before through `bloom` and the API.

The Membridge admin key saved with POST /api/runtime/config differs from the env file's, so
the runtime reaches Membridge after the restore only if the secret key that encrypted it came
back too. And PostgreSQL's password never reaches pg_dump's or pg_restore's command line."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import psycopg
from sqlalchemy import make_url

from bloom.deploy.render import fill_env, runtime_env, worker_env
from tests.process.deploy.conftest import host_for, private_file, write_script
from tests.support.api import API, success
from tests.support.membridge import MembridgeProcess
from tests.support.nginx import tool
from tests.support.postgres import PostgresCluster
from tests.support.s3 import Bucket
from tests.support.server import RuntimeProcess

API_KEY = "drill-runtime-key-0123456789"
MEMBRIDGE_KEY = "drill-membridge-admin-key-0123"
ENV_MEMBRIDGE_KEY = "not-the-key-membridge-accepts-000"


def run(argv: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{argv[0]}: {done.stdout}\n{done.stderr}"
    return done.stdout


def bloom(*args: str, env: dict[str, str]) -> str:
    return run([sys.executable, "-m", "bloom.cli.main", *args], env)


def test_backup_then_restore_after_losing_everything(
    tmp_path: Path, postgres: PostgresCluster, s3_bucket: Bucket
) -> None:
    tool("rclone")
    database = f"drill_{os.getpid()}"
    with psycopg.connect(postgres.url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    host = host_for(tmp_path)
    env_file, data_dir = Path(host.env_file), Path(host.data_dir)
    settings = {
        "DATABASE_URL": postgres.url(database),
        "BLOOM_ARTIFACT_STORE": "s3",
        "BLOOM_AUDIT_EXPORT_SETTLE_SEC": "0",
        **s3_bucket.env(),
    }
    private_file(env_file, fill_env(runtime_env(host, ENV_MEMBRIDGE_KEY, API_KEY), settings))
    private_file(Path(host.worker_env_file), worker_env(host, MEMBRIDGE_KEY))
    backup_script = write_script(host, "backup/bloom-backup.sh", tmp_path / "sbin/bloom-backup")
    restore_script = write_script(host, "backup/bloom-restore.sh", tmp_path / "sbin/bloom-restore")
    scripts_env = {
        **os.environ,
        "PATH": f"{postgres.bindir}:{os.environ['PATH']}",  # pg_dump of the server's version
        "BLOOM_ENV_FILE": str(env_file),
        "BLOOM_USER": "root",
    }
    cli_env = {**os.environ, "BLOOM_ENV_FILE": str(env_file)}
    for name in ("DATABASE_URL", "BLOOM_DATABASE_URL", "RUNTIME_API_KEY", "BLOOM_API_KEY"):
        cli_env.pop(name, None)

    membridge = MembridgeProcess(data_dir, admin_key=MEMBRIDGE_KEY, BLOOM_ENV_FILE=str(env_file))
    runtime = RuntimeProcess(
        postgres.url(database),
        data_dir,
        BLOOM_ENV_FILE=str(env_file),
        BLOOM_MEMBRIDGE_URL=membridge.url,
        **s3_bucket.env(),
    )
    membridge.start()
    runtime.start()
    try:
        before = _do_work(runtime.url, membridge.url)
        viewer_key = bloom("key", "create", "--role", "viewer", env=cli_env).strip()
        bloom("audit", "export", env=cli_env)
        audit_keys = s3_bucket.keys("audit/")
        assert audit_keys, "the audit export wrote nothing"
    finally:
        runtime.stop()
        membridge.stop()

    backup_dir = Path(
        run(["sh", str(backup_script), str(tmp_path / "backups")], scripts_env).strip()
    )
    assert sorted(p.name for p in backup_dir.iterdir()) == [
        "SHA256SUMS", "VERSION", "bucket", "env", "membridge.db", "runtime.pgdump", "secret.key",
    ]  # fmt: skip
    assert sorted(p.name for p in (backup_dir / "env").iterdir()) == [
        "bloom-runtime.env",
        "bloom-worker.env",
    ]
    assert oct(backup_dir.stat().st_mode & 0o777) == "0o700"

    # The disaster: the database, the data dir (secret.key, membridge.db), env files, bucket.
    with psycopg.connect(postgres.url(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {database} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {database}")  # empty: what the drill restores into
    secret_key = (data_dir / "secret.key").read_bytes()
    shutil.rmtree(data_dir)
    env_text = env_file.read_text()
    env_file.unlink()
    Path(host.worker_env_file).unlink()
    _empty_the_bucket(s3_bucket)
    assert s3_bucket.keys() == []

    restored = run(["sh", str(restore_script), str(backup_dir)], scripts_env)
    assert f"restored {env_file}" in restored
    assert env_file.read_text() == env_text
    assert oct(env_file.stat().st_mode & 0o777) == "0o600"
    assert (data_dir / "secret.key").read_bytes() == secret_key
    assert s3_bucket.keys("audit/") == audit_keys
    head = s3_bucket.client().head_object(Bucket=s3_bucket.name, Key=audit_keys[0])
    assert "last-id" in head["Metadata"]  # the export's checkpoint metadata came back too

    membridge.start()
    runtime.start()
    try:
        _check_everything_is_back(runtime, before, viewer_key, cli_env)
        bloom("audit", "export", env=cli_env)  # the export goes on from where it was
    finally:
        runtime.stop()
        membridge.stop()
    assert "membridge_admin_key_unreadable" not in runtime.log()


def _do_work(runtime_url: str, membridge_url: str) -> dict[str, object]:
    """Tasks completed with output, the Membridge config saved: what a backup must keep."""
    headers = {"X-Runtime-API-Key": API_KEY}
    with httpx.Client(base_url=runtime_url + API, headers=headers, timeout=30) as http:
        saved = http.post(
            "/config", json={"membridge_server_url": membridge_url, "admin_key": MEMBRIDGE_KEY}
        )
        assert saved.status_code == 200, saved.text
        assert http.post("/test-connection").json()["connected"] is True
        worker = {"name": "w1", "capabilities": {"claude_cli": True, "max_concurrency": 1}}
        assert http.post("/workers", json=worker).status_code in (200, 201)
        outputs = {}
        for n in range(3):
            body = {"context_id": f"c{n}", "agent_slug": "default", "prompt": f"question {n}"}
            task_id = http.post("/llm-tasks", json=body).json()["id"]
            grant = http.post("/workers/w1/claim", json={"wait_seconds": 5}).json()
            done = http.post(
                f"/llm-tasks/{task_id}/complete",
                json={"lease_id": grant["lease"]["id"], **success(f"answer {n}")},
            )
            assert done.status_code == 200, done.text
            outputs[task_id] = f"answer {n}"
        config = http.get("/config").json()
        audit = http.get("/audit", params={"limit": 1000}).json()
    return {"outputs": outputs, "config": config, "audit": len(audit)}


def _empty_the_bucket(bucket: Bucket) -> None:
    s3 = bucket.client()
    for key in bucket.keys(""):
        s3.delete_object(Bucket=bucket.name, Key=key)
    s3.delete_bucket(Bucket=bucket.name)


def _check_everything_is_back(
    runtime: RuntimeProcess, before: dict[str, object], viewer_key: str, cli_env: dict[str, str]
) -> None:
    outputs = before["outputs"]
    assert isinstance(outputs, dict)
    listed = json.loads(bloom("task", "list", "--json", "--url", runtime.url, env=cli_env))
    assert {task["id"]: task["status"] for task in listed} == dict.fromkeys(outputs, "completed")
    first, *others = outputs
    shown = json.loads(bloom("task", "show", first, "--json", "--url", runtime.url, env=cli_env))
    (artifact,) = shown["artifacts"]
    content = bloom("artifact", "get", artifact["id"], "--url", runtime.url, env=cli_env)
    assert content == outputs[first]  # from the restored bucket, by the restored row
    with httpx.Client(base_url=runtime.url + API, timeout=30) as http:
        admin = {"X-Runtime-API-Key": API_KEY}
        for task_id in others:
            (artifact,) = http.get("/artifacts", params={"task_id": task_id}, headers=admin).json()
            content = http.get(f"/artifacts/{artifact['id']}/content", headers=admin).text
            assert content == outputs[task_id]
        config, saved = http.get("/config", headers=admin).json(), before["config"]
        assert isinstance(saved, dict)
        for name in ("membridge_server_url", "admin_key_masked"):
            assert config[name] == saved[name], name
        # The saved Membridge key opens (the secret key is back) and is the one Membridge takes.
        assert http.post("/test-connection", headers=admin).json()["connected"] is True
        assert http.get("/stats", headers={"X-Runtime-API-Key": viewer_key}).status_code == 200
        audit = http.get("/audit", params={"limit": 1000}, headers=admin).json()
        assert len(audit) >= before["audit"]  # type: ignore[operator]


SHIM = """#!/bin/sh
# {name}, recorded: its argv, its environment and the password file it was given; then the real one.
record="{records}/{name}"
printf '%s\\n' "$@" >"$record.argv"
env >"$record.env"
if [ -n "${{PGPASSFILE:-}}" ]; then
\tcp "$PGPASSFILE" "$record.pgpass"
\tstat -c %a "$PGPASSFILE" >"$record.mode"
\techo "$PGPASSFILE" >"$record.path"
fi
exec "{bindir}/{name}" "$@"
"""


def test_backup_and_restore_give_postgresql_its_password_off_the_command_line(
    tmp_path: Path, postgres: PostgresCluster
) -> None:
    """pg_dump and pg_restore are named the database without its password, which reaches them in
    a password file of their own (mode 0600, removed once they are done), in no argv and no
    environment; the dump restores. (The test cluster trusts every local connection, so the
    password file's line is checked as written: `:` and `\\` escaped.)"""
    password = "pg-secret:with\\odd-chars-4711"
    database = f"pw_{os.getpid()}"
    with psycopg.connect(postgres.url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    url = make_url(postgres.url(database)).set(password=password)
    host = host_for(tmp_path)
    env_file = Path(host.env_file)
    private_file(
        env_file,
        fill_env(
            runtime_env(host, ENV_MEMBRIDGE_KEY, API_KEY),
            {"DATABASE_URL": url.render_as_string(hide_password=False)},
        ),
    )
    records, shims = tmp_path / "records", tmp_path / "shims"
    records.mkdir()
    shims.mkdir()
    for name in ("pg_dump", "pg_restore"):
        shim = shims / name
        shim.write_text(SHIM.format(name=name, records=records, bindir=postgres.bindir))
        shim.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{shims}:{postgres.bindir}:{os.environ['PATH']}",
        "BLOOM_ENV_FILE": str(env_file),
        "BLOOM_USER": "root",
    }
    for name in ("DATABASE_URL", "BLOOM_DATABASE_URL", "PGPASSWORD", "PGPASSFILE"):
        env.pop(name, None)
    bloom("db", "upgrade", env=env)
    backup_script = write_script(host, "backup/bloom-backup.sh", tmp_path / "sbin/bloom-backup")
    restore_script = write_script(host, "backup/bloom-restore.sh", tmp_path / "sbin/bloom-restore")

    backup_dir = Path(run(["sh", str(backup_script), str(tmp_path / "backups")], env).strip())
    assert (backup_dir / "runtime.pgdump").stat().st_size > 0
    with psycopg.connect(postgres.url(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {database} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {database}")
    run(["sh", str(restore_script), str(backup_dir)], env)
    with psycopg.connect(postgres.url(database)) as conn:
        assert conn.execute("SELECT count(*) FROM llm_tasks").fetchone() == (0,)

    escaped = password.replace("\\", "\\\\").replace(":", "\\:")
    for name in ("pg_dump", "pg_restore"):
        argv = (records / f"{name}.argv").read_text()
        assert database in argv
        assert "pg-secret" not in argv, argv
        assert "pg-secret" not in (records / f"{name}.env").read_text()
        assert (records / f"{name}.pgpass").read_text() == f"*:*:*:*:{escaped}\n"
        assert (records / f"{name}.mode").read_text().strip() == "600"
        assert not Path((records / f"{name}.path").read_text().strip()).exists()
