"""A uvicorn server on a socket already bound, in a thread with its own event loop: how the local
stack serves its stand-ins (the gateway, the AgentCore app, the Transcribe endpoint)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

import uvicorn


@dataclass
class RunningServer:
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)


def serve_in_thread(app: Any, sock: socket.socket, name: str, **config: Any) -> RunningServer:
    server = uvicorn.Server(
        uvicorn.Config(app, **{"log_level": "warning", "ws": "websockets-sansio", **config})
    )
    thread = threading.Thread(
        target=lambda: asyncio.run(server.serve(sockets=[sock])), name=name, daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"the {name} did not start")
        time.sleep(0.01)
    return RunningServer(server, thread)
