"""A real S3 endpoint for the tests (moto's server in a child process), and a TCP proxy in front
of it whose connection can be cut and restored, to play an object-store outage."""

import asyncio
import contextlib
import gzip
import json
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from botocore.session import get_session

from tests.support.net import free_port

ACCESS_KEY = "test-access-key"
SECRET_KEY = "test-secret-key-not-real"
REPOSITORY = Path(__file__).parents[2]


@dataclass(frozen=True)
class Bucket:
    """A fresh bucket name on an endpoint, and the environment that points a process at it."""

    endpoint: str
    name: str

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "MINIO_ENDPOINT": self.endpoint,
            "MINIO_ACCESS_KEY": ACCESS_KEY,
            "MINIO_SECRET_KEY": SECRET_KEY,
            "MINIO_BUCKET": self.name,
            "MINIO_REGION": "us-east-1",
            **extra,
        }

    def client(self) -> Any:
        """A plain botocore client of the endpoint: to read what the code under test wrote."""
        return get_session().create_client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )

    def keys(self, prefix: str = "") -> list[str]:
        """The bucket's keys under `prefix`, sorted; none while the bucket does not exist."""
        s3 = self.client()
        try:
            listing = s3.list_objects_v2(Bucket=self.name, Prefix=prefix)
        except s3.exceptions.NoSuchBucket:
            return []
        return sorted(item["Key"] for item in listing.get("Contents", []))

    def audit_entries(self) -> list[dict[str, Any]]:
        """Every entry of the audit export's objects, in key order."""
        s3, entries = self.client(), []
        for key in self.keys("audit/"):
            body = s3.get_object(Bucket=self.name, Key=key)["Body"].read()
            entries += [json.loads(line) for line in gzip.decompress(body).splitlines()]
        return entries

    def settings(self) -> dict[str, object]:
        """The same, as settings overrides."""
        return {
            "s3_endpoint": self.endpoint,
            "s3_access_key": ACCESS_KEY,
            "s3_secret_key": SECRET_KEY,
            "s3_bucket": self.name,
        }


def new_bucket_name() -> str:
    return f"test-{uuid.uuid4().hex[:20]}"


class MotoServer:
    """moto's S3 server (`moto_atomic.py`: its conditional writes atomic) on a free loopback port;
    its state lives as long as the process."""

    def __init__(self, log_dir: Path):
        self.port = free_port()
        self.log_path = log_dir / f"moto-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.support.moto_atomic",
                    "-H",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                ],
                cwd=REPOSITORY,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"moto server exited: {self.log_path.read_text()}")
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(f"{self.url}/moto-api/", timeout=1)
                return
            time.sleep(0.1)
        raise TimeoutError("moto server did not start")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


class TcpProxy:
    """Forwards a loopback port to `target_port`. `cut()` drops every connection and refuses new
    ones (the store is down); `restore()` listens again on the same port."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._thread.start()
        self.restore()

    def _call(self, coro: object) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)  # type: ignore[arg-type]

    def restore(self) -> None:
        self._call(self._listen())

    def cut(self) -> None:
        self._call(self._close())

    def stop(self) -> None:
        self.cut()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, "127.0.0.1", self.port, reuse_address=True
        )

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update({writer, up_writer})
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        self._writers.difference_update({writer, up_writer})


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.transport.abort()
