"""An ASGI app served over real HTTP by uvicorn from a thread of its own (its own event loop,
lifespan and all), on a free port: a stand-in agent, or a whole server for a test."""

import threading
import time
from typing import Any

import uvicorn

from tests.support.net import free_port


class ThreadedServer:
    def __init__(self, app: Any):
        self.port = free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert self.thread.is_alive(), "the server stopped while starting"
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
