"""Loopback helpers shared by the tests that start real servers (exporter, Prometheus,
Alertmanager, vLLM)."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterable

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
