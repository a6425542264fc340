"""The HTTP side under hostile clients: idle-connection floods at a 1,024-fd limit, scrape
bursts, malformed requests and log forging, silent and slow connections (docs/threats.md:
fd-exhaustion, scrape-burst, log-forging, silent-connections)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import shutil
import socket
import time
from pathlib import Path

import aiohttp
import pytest

from exporter.assembly.config import ScrapeSettings
from exporter.host.logs import JsonFormatter, LogfmtFormatter, RateLimit, escape_control
from exporter.web import app as web_app
from exporter.web.app import make_app
from exporter.web.connections import ConnectionGuard
from tests.conftest import fixture_pipeline, host_config
from tests.helpers.hostile import FIXTURE_ARGS, http_get, idle_connections, raise_nofile, serve
from tests.helpers.net import serve_app

WORKLOAD_SERIES = b"headroom_memory_usage_bytes{"


def test_idle_connections_do_not_block_metrics(tmp_path: Path) -> None:
    """At an open-file limit of 1,024, 1,000 idle connections left /metrics and /healthz
    unanswered (the exporter had no descriptors left). Now the longest-idle connection is
    evicted at the cap and silent ones are closed at the header timeout (docs/threats.md:
    fd-exhaustion)."""
    if shutil.which("prlimit") is None:
        pytest.skip("needs prlimit (util-linux)")
    raise_nofile(4096)
    with serve([*FIXTURE_ARGS, "--web.header-timeout=2s"], tmp_path,
               prefix=["prlimit", "--nofile=1024:1024"]) as s, idle_connections(s.port) as idle:
        # Answered at all (it had no descriptors left): generous deadlines, no timing.
        status, _, body = http_get(s.url + "/metrics", timeout=60)
        assert status == 200 and WORKLOAD_SERIES in body
        assert http_get(s.url + "/healthz", timeout=60)[0] == 200
        # The silent ones are closed by the 2 s header timeout (well before the 90 s
        # idle timeout, the deadline here): the fds come back.
        deadline = time.monotonic() + 60
        while (open_now := _still_open(idle)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert open_now == 0


def _still_open(socks: list[socket.socket]) -> int:
    """How many of ``socks`` the server has not closed (no EOF, no reset)."""
    n = 0
    for sock in socks:
        sock.setblocking(False)
        try:
            if sock.recv(1):
                n += 1
        except BlockingIOError:
            n += 1
        except OSError:
            pass
    return n


def test_silent_and_slow_clients_are_closed(tmp_path: Path) -> None:
    """A connection that never sent a byte stayed open forever. Now a request head must
    arrive within --web.header-timeout, however slowly it trickles (docs/threats.md:
    silent-connections)."""
    with serve([*FIXTURE_ARGS, "--web.header-timeout=1s"], tmp_path) as s:
        silent = socket.create_connection(("127.0.0.1", s.port))
        slow = socket.create_connection(("127.0.0.1", s.port))
        start = time.monotonic()
        slow.sendall(b"GET /metrics HTTP/1.1\r\n")
        closed: dict[str, float] = {}
        # Until both are closed, within a deadline below the 90 s keep-alive idle timeout:
        # closed then, it was the 1 s header timeout (how soon is not asserted: load).
        while time.monotonic() - start < 60 and len(closed) < 2:
            try:
                slow.sendall(b"X-Slow: 1\r\n")  # slowloris: one header line at a time
            except OSError:
                closed.setdefault("slow", time.monotonic() - start)
            silent.setblocking(False)
            try:
                if silent.recv(1) == b"":
                    closed.setdefault("silent", time.monotonic() - start)
            except BlockingIOError:
                pass
            except OSError:
                closed.setdefault("silent", time.monotonic() - start)
            time.sleep(0.2)
        silent.close()
        slow.close()
        assert set(closed) == {"silent", "slow"}, closed
        # A keep-alive client that sends requests in time is served on one connection.
        with socket.create_connection(("127.0.0.1", s.port)) as ka:
            for _ in range(3):
                ka.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                assert b"200 OK" in ka.recv(4096)
                time.sleep(0.5)


class _FakeTransport:
    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


def test_connection_cap_evicts_the_longest_idle_never_a_busy_one() -> None:
    now = [0.0]
    guard = ConnectionGuard(max_connections=3, header_timeout=10, idle_timeout=60,
                            request_timeout=30, clock=lambda: now[0])
    t = [_FakeTransport() for _ in range(6)]
    for i in range(3):
        now[0] = float(i)
        assert guard.admit(t[i])  # type: ignore[arg-type]
    guard.begin(t[0])  # type: ignore[arg-type]
    assert guard.admit(t[3])  # type: ignore[arg-type]
    assert t[1].aborted and not t[0].aborted  # t1: the longest idle; t0 is in a request
    now[0] = 20.0
    guard.begin(t[2])  # type: ignore[arg-type]
    guard.begin(t[3])  # type: ignore[arg-type]
    assert not guard.admit(t[4])  # type: ignore[arg-type]  # all busy: refuse the new one
    assert guard.stats.refused == 1 and guard.stats.evicted == 1
    guard.end(t[3])  # type: ignore[arg-type]
    now[0] = 40.0
    assert guard.sweep() == 1 and t[0].aborted  # busy for 37 s > request timeout
    now[0] = 45.0
    assert guard.sweep() == 0  # t3 served one request: the idle timeout (60 s) applies
    now[0] = 51.0
    assert guard.sweep() == 1 and t[2].aborted  # busy since 20 s
    now[0] = 101.0
    assert guard.sweep() == 1 and t[3].aborted and len(guard) == 0


async def test_scrape_during_a_burst_keeps_workload_series(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each of 150 concurrent scrapes rendered in the shared thread pool; the next
    collection's collectors queued behind the renders and timed out, so a scrape in the
    burst had no workload series (docs/threats.md: scrape-burst). A render costs 300 ms
    here (a big node): 150 of them queued in the pool are about 8 s, well past the 3 s
    collector timeout, which a collector on a fixture tree stays far below on a busy
    machine when nothing queues."""
    real_render = web_app.render

    def slow_render(*args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(0.3)
        return real_render(*args, **kwargs)

    monkeypatch.setattr(web_app, "render", slow_render)
    cfg = host_config("v1-cgroupfs-containerd").with_settings(ScrapeSettings(collector_timeout=3.0))
    pipeline = fixture_pipeline(cfg)
    runner, port = await serve_app(make_app(pipeline))
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        async with aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0),
                timeout=aiohttp.ClientTimeout(total=60)) as session:
            async def scrape(delay: float) -> bytes:
                await asyncio.sleep(delay)
                async with session.get(url) as r:
                    assert r.status == 200
                    return await r.read()

            burst = [asyncio.ensure_future(scrape(0)) for _ in range(150)]
            late = [asyncio.ensure_future(scrape(0.3 + 0.2 * i)) for i in range(5)]
            bodies = await asyncio.gather(*burst, *late)
        missing = [i for i, b in enumerate(bodies) if WORKLOAD_SERIES not in b]
        assert not missing, f"{len(missing)} scrapes without workload series"
    finally:
        await runner.cleanup()
        await pipeline.aclose()


def test_malformed_requests_log_one_short_line_each(tmp_path: Path) -> None:
    """A request with ~200 headers logged an 839-byte traceback, per request
    (docs/threats.md: log-forging)."""
    with serve(list(FIXTURE_ARGS), tmp_path) as s:
        time.sleep(0.3)
        before = len(s.log_text())
        for _ in range(300):
            with socket.create_connection(("127.0.0.1", s.port)) as sock:
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"".join(
                    b"X-%d: y\r\n" % j for j in range(200)) + b"\r\n")
                assert sock.recv(100).split(b" ")[1] == b"400"
        time.sleep(0.3)
        added = s.log_text()[before:]
    assert "Traceback" not in added
    # At most the rate limit's burst of one-line messages (~150 bytes each).
    assert len(added) < 3000, len(added)
    assert all(line.startswith("ts=") for line in added.splitlines())


HOSTILE = "evil\nts=2026 level=error msg=\"forged\"\\ \x1b[31mred \u202egnp.exe\x00"


def _record(msg: str, *args: object, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("line one\nline two")
        except ValueError:
            import sys

            exc_info = sys.exc_info()
    return logging.LogRecord("exporter.x", logging.ERROR, __file__, 1, msg, args, exc_info)


def _logfmt(line: str) -> list[tuple[str, str]]:
    """A strict logfmt reader: key=value or key="escaped value", space separated."""
    pairs = re.findall(r'([a-z_]+)=("(?:[^"\\]|\\.)*"|[^ "]+)(?: |$)', line)
    assert " ".join(f"{k}={v}" for k, v in pairs) == line, "not strict logfmt"
    return pairs


def test_log_lines_are_one_escaped_line() -> None:
    """Logfmt kept raw newlines and backslashes (a pod named with a newline forged a whole
    log line); ESC and RTL overrides reached terminals (docs/threats.md: log-forging)."""
    line = LogfmtFormatter().format(_record("process %s exited", HOSTILE, exc=True))
    assert "\n" not in line and "\x1b" not in line and "\u202e" not in line
    assert "\x00" not in line
    assert [k for k, _ in _logfmt(line)] == ["ts", "level", "logger", "msg", "exc"]
    assert '\\"forged\\"' in line and "\\\\ " in line and "\\u001b" in line
    assert "\\u202e" in line and 'exc="Traceback' in line
    doc = json.loads(JsonFormatter().format(_record("p %s", HOSTILE, exc=True)))
    assert doc["msg"] == f"p {HOSTILE}"  # JSON keeps the text exactly, escaped
    raw = JsonFormatter().format(_record("p %s", HOSTILE))
    assert "\n" not in raw and "\u202e" not in raw and "\x1b" not in raw
    assert escape_control("a\tb\u2028c") == "a\\tb\\u2028c"


def test_repeated_messages_are_rate_limited() -> None:
    now = [0.0]
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(LogfmtFormatter())
    handler.addFilter(RateLimit(burst=3, period=10, clock=lambda: now[0]))
    for i in range(100):
        handler.handle(_record("collector %s failed", f"cgroup-{i}"))
    handler.handle(_record("another message"))
    now[0] = 11.0
    handler.handle(_record("collector %s failed", "again"))
    lines = stream.getvalue().splitlines()
    assert len(lines) == 5
    assert "suppressed=97" in lines[-1]
