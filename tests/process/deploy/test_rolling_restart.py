"""A rolling restart behind the repository's nginx site, as docs/deployment.md describes it: two
runtime replicas on one PostgreSQL database (the second added to the site's upstream), real
workers running the real Claude CLI through HTTPS, and a client submitting tasks all along.
Each replica is restarted in turn (SIGTERM, then started again), then each worker is drained
(SIGTERM). No task is lost or run twice, and every request the client made succeeded, retried
only where it got nginx's 502 or no connection, which a client retries (with the task's
idempotency key, so a retry never makes a second task)."""

import ssl
import threading
import time
import uuid
from pathlib import Path

import httpx

from bloom.deploy.render import nginx_site, runtime_env
from tests.process.deploy.conftest import host_for, private_file, self_signed
from tests.support.api import API
from tests.support.databases import fresh_postgres_url
from tests.support.net import free_port
from tests.support.nginx import Nginx
from tests.support.postgres import PostgresCluster
from tests.support.server import RuntimeProcess
from tests.support.stack import wait_for
from tests.support.worker import EchoModelProcess, WorkerProcess

API_KEY = "rolling-restart-runtime-key-0123456789"
TASKS = 16
RETRIED = {502, 503, 504}


def trusting(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


class Submitter(threading.Thread):
    """Submits TASKS tasks through nginx, one every 0.4 s, retrying a 5xx or a lost connection
    with the same idempotency key, and counts what it had to retry."""

    def __init__(self, base_url: str, ca: Path):
        super().__init__(daemon=True)
        headers = {"X-Runtime-API-Key": API_KEY}
        self.http = httpx.Client(
            base_url=base_url, verify=trusting(ca), headers=headers, timeout=30
        )
        self.ids: list[str] = []
        self.retries = 0
        self.failures: list[str] = []

    def run(self) -> None:
        with self.http:
            for n in range(TASKS):
                self.ids.append(self.submit(n))
                time.sleep(0.4)

    def submit(self, n: int) -> str:
        body = {
            "context_id": f"rolling-{n}",
            "agent_slug": "default",
            "prompt": f"task {n} [[sleep 1]]",
            "idempotency_key": f"rolling-{uuid.uuid4().hex}",
        }
        for _ in range(60):
            try:
                answer = self.http.post(f"{API}/llm-tasks", json=body)
            except httpx.TransportError:
                self.retries += 1
            else:
                if answer.status_code in (200, 201):
                    task_id: str = answer.json()["id"]
                    return task_id
                if answer.status_code not in RETRIED:
                    self.failures.append(f"{answer.status_code} {answer.text}")
                    return ""
                self.retries += 1
            time.sleep(0.25)
        self.failures.append(f"task {n} never accepted")
        return ""


def test_replicas_restarted_one_by_one_and_workers_drained_lose_nothing(
    tmp_path: Path, postgres: PostgresCluster, claude: Path
) -> None:
    database = fresh_postgres_url(postgres)
    data_dir = tmp_path / "data"
    env_file = tmp_path / "bloom-runtime.env"
    replicas = [RuntimeProcess(database, data_dir, BLOOM_ENV_FILE=str(env_file)) for _ in range(2)]
    host = host_for(
        tmp_path,
        domain="127.0.0.1",  # the workers speak TLS to an address: the certificate names it
        http_port=free_port(),
        https_port=free_port(),
        runtime_port=replicas[0].port,
    )
    private_file(env_file, runtime_env(host, "unused-membridge-key", API_KEY))
    ca = self_signed(host, "127.0.0.1")
    # docs/deployment.md: a second replica is one more server in the site's upstream.
    first = f"    server 127.0.0.1:{replicas[0].port} max_fails=0;\n"
    second = f"    server 127.0.0.1:{replicas[1].port} max_fails=0;\n"
    assert first in nginx_site(host)
    site = nginx_site(host).replace(first, first + second)
    nginx = Nginx(tmp_path / "nginx", site)
    model = EchoModelProcess(tmp_path / "model")
    https = f"https://127.0.0.1:{host.https_port}"
    workers = [
        WorkerProcess(
            name,
            data_dir,
            https,
            model.url,
            claude,
            BLOOM_WORKER_API_KEY=API_KEY,
            SSL_CERT_FILE=str(ca),
            BLOOM_WORKER_DRAIN_TIMEOUT_SEC="60",
        )
        for name in ("w1", "w2")
    ]
    started: list[RuntimeProcess | WorkerProcess | EchoModelProcess] = []
    try:
        for replica in replicas:  # one at a time: the first makes the shared secret.key
            replica.start()
            started.append(replica)
        nginx.start([host.http_port, host.https_port])
        model.start()
        started.append(model)
        for worker in workers:
            worker.start()
            started.append(worker)

        submitter = Submitter(https, ca)
        submitter.start()
        for replica in replicas:  # the rolling restart
            time.sleep(2)
            replica.stop()
            replica.start()
        submitter.join(timeout=120)
        assert not submitter.is_alive()
        print(f"rolling restart: {submitter.retries} submissions retried")
        assert submitter.failures == []
        assert len(set(submitter.ids)) == TASKS

        with httpx.Client(
            base_url=https + API, verify=trusting(ca), headers={"X-Runtime-API-Key": API_KEY}
        ) as http:
            wait_for(
                lambda: all(
                    http.get(f"/llm-tasks/{task_id}").json()["status"] == "completed"
                    for task_id in submitter.ids
                ),
                120,
                "every task completed",
            )
            for worker in workers:  # drained one by one: each exits 0
                worker.stop()
                assert worker.process is not None
                assert worker.process.returncode == 0, worker.log()[-3000:]
            listed = http.get("/llm-tasks", params={"limit": 100}).json()
            assert len(listed) == TASKS  # no retry made a second task
            for task_id in submitter.ids:
                artifacts = http.get("/artifacts", params={"task_id": task_id}).json()
                assert len(artifacts) == 1, task_id  # completed once
    finally:
        nginx.stop()
        for process in reversed(started):
            process.stop()
