"""Loopback helpers shared by the tests that start real servers (exporter, Prometheus,
Alertmanager, vLLM)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiohttp import web


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """Until ``url`` answers; fails at once when ``proc`` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args!r} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not answer")


def stop_all(procs: Iterable[subprocess.Popen[bytes]], timeout: float = 10) -> None:
    """SIGTERM every process first (they shut down side by side), then wait; kill stragglers."""
    procs = list(procs)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()


async def serve_app(app: web.Application) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on a free loopback port: its runner (``cleanup()`` it) and the port."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port: int = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port


class PostReceiver:
    """A loopback HTTP server (its own thread, a free port) that hands the JSON body of
    each POST to ``post`` and answers 200: an Alertmanager webhook receiver."""

    def __init__(self) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                outer.post(self.path, json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def post(self, path: str, body: Any) -> None:
        raise NotImplementedError
