"""The web front under hostile clients: the /debug/oom/ index under a burst, basic auth
under a flood of wrong passwords, SIGHUP with an empty, partial or invalid web config,
SIGHUP right after exec, a huge web config (docs/threats.md: index-burst, password-flood,
reload-turns-auth-off, early-sighup, huge-web-config; the test names keep the threats'
short names, R6 to R11)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest

from exporter.assembly.config import RecorderSettings, ScrapeSettings
from exporter.assembly.factory import Exporter
from exporter.postmortem.docdir import DocumentDir
from exporter.postmortem.documents import DocumentStore
from exporter.web.app import make_app
from exporter.web.auth import BasicAuth
from exporter.web.security import Security
from exporter.web.webconfig import WebConfig, WebConfigError, load_web_config
from tests.conftest import fixture_pipeline, host_config
from tests.helpers.hostile import (
    FIXTURE_ARGS,
    Served,
    basic,
    bcrypt_hash,
    free_port,
    http_get,
    serve,
    wait_port,
    write_big_documents,
)
from tests.helpers.net import serve_app

MiB = 1 << 20
WORKLOAD_SERIES = b"headroom_memory_usage_bytes{"
DISCOVERY_OK = b'headroom_collector_success{collector="discovery"} 1'


@asynccontextmanager
async def app_server(exporter: Exporter, security: Security | None = None
                     ) -> AsyncIterator[str]:
    """The real application on a loopback port; yields its base URL."""
    runner, port = await serve_app(make_app(exporter, security))
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
        await exporter.aclose()


async def test_index_burst_parses_each_document_once_and_scrapes_keep_series(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The HTML index parsed every stored document on every request (1.5 s with 50);
    40 concurrent requests made a scrape's discovery collector time out. Now rows come
    from a cache keyed on each file's stamp: the burst parses each document at most once
    more, and scrapes during it keep discovery and the workload series (docs/threats.md:
    index-burst)."""
    docs = tmp_path / "oom"
    write_big_documents(docs)
    reads: list[str] = []
    real_get = DocumentStore.get

    def counting_get(self: DocumentStore, name: str) -> dict[str, object] | None:
        reads.append(name)
        return real_get(self, name)

    monkeypatch.setattr(DocumentStore, "get", counting_get)
    cfg = host_config("v1-cgroupfs-containerd").with_settings(
        ScrapeSettings(collector_timeout=1.0), RecorderSettings(dir=docs))
    async with app_server(fixture_pipeline(cfg)) as url, aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=120)) as session:
        async def get(path: str, delay: float = 0.0) -> tuple[int, bytes]:
            await asyncio.sleep(delay)
            async with session.get(url + path, headers={"Accept": "text/html"}) as r:
                return r.status, await r.read()

        status, first = await get("/debug/oom/")
        for _ in range(5):  # rows are filled in a bounded number per request
            status, first = await get("/debug/oom/")
        assert status == 200 and first.count(b"<tr><td>") == 50
        before = len(reads)
        burst = [asyncio.ensure_future(get("/debug/oom/")) for _ in range(40)]
        scrapes = [asyncio.ensure_future(get("/metrics", 0.05 + 0.2 * i)) for i in range(4)]
        pages = await asyncio.gather(*burst)
        bodies = await asyncio.gather(*scrapes)
    assert {s for s, _ in pages} <= {200, 503} and any(s == 200 for s, _ in pages)
    assert all(p == first for s, p in pages if s == 200)
    assert len(reads) - before == 0, f"the burst parsed {len(reads) - before} documents"
    for status, body in bodies:
        assert status == 200 and WORKLOAD_SERIES in body and DISCOVERY_OK in body


def test_wrong_passwords_never_evict_a_good_verdict() -> None:
    """Good and bad verdicts shared one 100-entry cache and a hit did not refresh: 100
    distinct wrong passwords evicted Prometheus's entry (docs/threats.md: password-flood)."""
    auth = BasicAuth({"prometheus": bcrypt_hash("s3cret", cost=4).encode()})
    good = basic("prometheus", "s3cret")["Authorization"]
    assert auth.check(good) is True
    for i in range(100):
        assert auth.check(basic("prometheus", f"guess-{i}")["Authorization"]) is False
    assert auth.cached(good) is True


async def test_a_wrong_password_flood_is_refused_quickly_and_scrapes_pass(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a flood of distinct wrong passwords Prometheus's verdict stays cached
    (its scrapes never wait for bcrypt), and the excess beyond one bcrypt running and
    eight queued is answered 503 at once instead of joining an unbounded queue (6/6
    scrapes timed out at cost 12; docs/threats.md: password-flood)."""
    users = {"prometheus": bcrypt_hash("s3cret", cost=10).encode()}
    security = Security(None, WebConfig(users=users))
    good = basic("prometheus", "s3cret")
    pipeline = fixture_pipeline(host_config("v1-cgroupfs-containerd"))
    async with app_server(pipeline, security) as url, aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=120)) as session:
        async def get(headers: dict[str, str], delay: float = 0.0) -> int:
            await asyncio.sleep(delay)
            async with session.get(url + "/metrics", headers=headers) as r:
                await r.read()
                return r.status

        assert await get(good) == 200
        flood = [asyncio.ensure_future(get(basic("prometheus", f"guess-{i}")))
                 for i in range(300)]
        # Prometheus's scrape timeout is 10 s by default: a scrape must answer within it.
        scrapes = [asyncio.ensure_future(asyncio.wait_for(get(good, 0.1 * i), 10))
                   for i in range(1, 6)]
        statuses = await asyncio.gather(*flood)
        assert await asyncio.gather(*scrapes) == [200] * 5
    assert set(statuses) <= {401, 503}, set(statuses)
    assert statuses.count(503) >= 200  # beyond the pool and its queue: refused
    assert security.auth.cached(good["Authorization"]) is True


def wait_log(served: Served, needle: str, count: int, timeout: float = 30.0) -> str:
    """The exporter's log once ``needle`` is in it ``count`` times (a generous deadline:
    how long it takes is not what is checked)."""
    deadline = time.monotonic() + timeout
    while True:
        text = served.log_text()
        if text.count(needle) >= count or time.monotonic() > deadline:
            return text
        time.sleep(0.05)


def test_sighup_with_an_empty_partial_or_invalid_file_keeps_auth_on(
        tmp_path: Path) -> None:
    """SIGHUP while the web config was empty (truncated mid-write) was accepted and
    turned authentication off (/metrics 401 -> 200), logged at info. Now an empty file,
    one cut before its users, and an invalid one are each refused at warning level and
    the old config stays in force (docs/threats.md: reload-turns-auth-off)."""
    web_yml = tmp_path / "web.yml"
    users = f'basic_auth_users: {{prometheus: "{bcrypt_hash("s3cret", cost=4)}"}}\n'
    web_yml.write_text("http_server_config: {headers: {X-Frame-Options: deny}}\n" + users)
    good = basic("prometheus", "s3cret")
    with serve([f"--web.config.file={web_yml}", *FIXTURE_ARGS], tmp_path) as s:
        assert http_get(s.url + "/metrics")[0] == 401
        cases = ["", "http_server_config: {headers: {X-Frame-Options: deny}}\n",
                 users[:40]]
        for i, text in enumerate(cases, 1):
            web_yml.write_text(text)
            s.proc.send_signal(signal.SIGHUP)
            log = wait_log(s, "web config not reloaded", i)
            assert log.count("web config not reloaded") == i, log
            assert http_get(s.url + "/metrics")[0] == 401, f"auth off after {text!r}"
            assert http_get(s.url + "/metrics", good)[0] == 200
        lines = [ln for ln in log.splitlines() if "web config not reloaded" in ln]
        assert all("warning" in ln.lower() for ln in lines), lines
        assert "web config reloaded from" not in log


def test_sighup_while_starting_does_not_kill_the_exporter(tmp_path: Path) -> None:
    """A SIGHUP before the handler was installed killed the exporter with an empty
    log. The web config here is a FIFO: the exporter is held reading it, at start, when
    the SIGHUP comes; then it gets its config and serves (docs/threats.md:
    early-sighup)."""
    fifo = tmp_path / "web.yml"
    os.mkfifo(fifo)
    port = free_port()
    log_path = tmp_path / "exporter.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "exporter.cli", "serve",
             f"--web.listen-address=127.0.0.1:{port}", f"--web.config.file={fifo}",
             *FIXTURE_ARGS], stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    try:
        with fifo.open("w") as writer:  # returns once the exporter opened it to read
            for _ in range(3):
                proc.send_signal(signal.SIGHUP)
            time.sleep(0.2)  # let a fatal SIGHUP act before the config arrives
            writer.write("http_server_config: {headers: {X-Frame-Options: deny}}\n")
        wait_port(port, proc=proc)
        assert http_get(f"http://127.0.0.1:{port}/healthz")[0] == 200
        assert "SIGHUP before serving" in log_path.read_text()  # (signals coalesce)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        else:
            raise AssertionError(f"exited {proc.returncode}: {log_path.read_text()!r}")


def test_a_web_config_over_1_mib_is_refused(tmp_path: Path) -> None:
    """Any size was read and parsed (a 30 MB file held the event loop ~60 s;
    docs/threats.md: huge-web-config)."""
    big = tmp_path / "web.yml"
    big.write_text("# padding\n" * (MiB // 10 + 1)
                   + "http_server_config: {headers: {X-Frame-Options: deny}}\n")
    with pytest.raises(WebConfigError, match="larger than 1 MiB"):
        load_web_config(big)
    ok = tmp_path / "ok.yml"
    ok.write_text("#" + "x" * (MiB // 2) + "\n")
    assert load_web_config(ok).users == {}


def test_a_reload_that_cannot_finish_reading_leaves_the_loop_serving(
        tmp_path: Path) -> None:
    """The reload read and parsed the file on the event loop (docs/threats.md:
    huge-web-config). Here the file is swapped for a FIFO nobody writes yet: the reload
    waits in its thread while /healthz and /metrics answer; once the FIFO delivers a config,
    it applies."""
    web_yml = tmp_path / "web.yml"
    users = f'basic_auth_users: {{prometheus: "{bcrypt_hash("s3cret", cost=4)}"}}\n'
    web_yml.write_text(users)
    good = basic("prometheus", "s3cret")
    with serve([f"--web.config.file={web_yml}", *FIXTURE_ARGS], tmp_path) as s:
        fifo = tmp_path / "web.fifo"
        os.mkfifo(fifo)
        fifo.replace(web_yml)
        s.proc.send_signal(signal.SIGHUP)
        with web_yml.open("w") as writer:  # the reload opened it: it waits for data now
            assert http_get(s.url + "/healthz", timeout=10)[0] == 200
            assert http_get(s.url + "/metrics", good, timeout=10)[0] == 200
            writer.write(users.replace("prometheus", "scraper"))
        log = wait_log(s, "web config reloaded from", 1)
        assert "web config reloaded from" in log, log
        assert http_get(s.url + "/metrics", basic("scraper", "s3cret"))[0] == 200


def test_index_cache_follows_the_directory(tmp_path: Path) -> None:
    """The cache is keyed on each file's (inode, size, mtime): a new, rewritten or removed
    document shows at the next request, and a request parses at most ``parses``."""
    from exporter.postmortem.index import IndexCache

    store = DocumentStore(tmp_path / "oom")
    d = DocumentDir(tmp_path / "oom")
    names = [d.write(f"20270115T0800{i:02d}Z-llm-p{i}-c-000.json",
                     json.dumps({"time": 1.8e9 + i, "pod": f"pod-{i}",
                                 "victim": {"process": "EngineCore"}}).encode())
             for i in range(12)]
    cache = IndexCache(max_rows=50, parses=5)
    first = cache.page(store)
    assert cache.parsed == 5 and first.count("EngineCore") == 5  # the rest by name
    cache.page(store)
    cache.page(store)
    assert cache.parsed == 12 and cache.page(store).count("EngineCore") == 12
    assert cache.parsed == 12  # unchanged directory: nothing parsed
    path = tmp_path / "oom" / names[3]
    path.write_text(json.dumps({"time": 1.8e9, "pod": "pod-3",
                                "victim": {"process": "Rewritten"}}))
    (tmp_path / "oom" / names[4]).unlink()
    page = cache.page(store)
    assert cache.parsed == 13 and "Rewritten" in page and "pod-4" not in page
