"""Cost of every parser a pod feeds on the vLLM path (docs/threats.md: parser-cost):
KV-event frames, /metrics bodies, /kv_event_sources answers.

For each, hostile shapes at two sizes n and 8n: the CPU time of the process
(``time.process_time``, best of three) and the peak of Python allocations (tracemalloc)
may grow at most linearly, with the constant stated here (LINEAR: 8n may cost at most
``8 * LINEAR`` times n, generous for a loaded machine; a quadratic parser costs 64x).
Memory also has an absolute constant per input byte. And the largest input each path
accepts must cost at most a stated CPU time on the event loop (``LOOP_CPU_S``): KV frames
are decoded in a thread, so for them that is the tracker's apply; /metrics is filtered
in 64 KiB slices as it streams, then parsed; /kv_event_sources is parsed whole (1 MiB cap).
CPU time, not wall time: other work on the machine does not count against it.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import msgpack
import pytest

from exporter.collectors.vllm import metrics as vm
from exporter.collectors.vllm import reading
from exporter.collectors.vllm.kv_endpoints import parse_kv_event_sources
from exporter.collectors.vllm.kv_events import KvBlockTracker, read_message
from exporter.collectors.vllm.zmtp import Limits

pytestmark = pytest.mark.fuzz

LINEAR = 3.0  # 8x the input may cost at most 24x the CPU and memory
LOOP_CPU_S = 0.5  # CPU seconds one largest input may hold the event loop
MAX_FRAME = Limits().max_frame  # the largest KV-event payload the subscriber reads


def cpu(fn: Callable[[], object], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return max(best, 1e-4)  # below the clock's resolution: as if 0.1 ms


def peak(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def assert_linear(name: str, make: Callable[[int], bytes], parse: Callable[[bytes], object],
                  n: int, mem_per_byte: float, fixed: int = 1 << 20) -> None:
    small, large = make(n), make(8 * n)
    t_small, t_large = cpu(lambda: parse(small)), cpu(lambda: parse(large))
    m_small, m_large = peak(lambda: parse(small)), peak(lambda: parse(large))
    assert t_large / t_small <= 8 * LINEAR, (
        f"{name}: CPU {t_small * 1e3:.1f} ms for {len(small)} B, "
        f"{t_large * 1e3:.1f} ms for {len(large)} B")
    assert m_large / max(m_small, 1) <= 8 * LINEAR, (
        f"{name}: memory {m_small} B for {len(small)} B, {m_large} B for {len(large)} B")
    assert m_large <= mem_per_byte * len(large) + fixed, (
        f"{name}: {m_large} B of memory for {len(large)} B of input")


# --- KV-event frames ------------------------------------------------------------------


def frames(events: list[Any]) -> list[bytes]:
    payload = bytes(msgpack.packb([1.0, events, 0], use_bin_type=True))
    return [b"", (0).to_bytes(8, "big"), payload]


KV_SHAPES: dict[str, Callable[[int], list[Any]]] = {
    # a new KV cache group per event
    "distinct groups": lambda n: [{"type": "BlockStored", "block_hashes": [i],
                                   "medium": "GPU", "group_idx": i} for i in range(n)],
    # the most events per byte: legacy arrays of one small hash
    "tiny events": lambda n: [["BlockRemoved", [i & 0x7F], None] for i in range(n)],
    # one event with a long array of 32-byte digests
    "long hash list": lambda n: [{"type": "BlockStored",
                                  "block_hashes": [i.to_bytes(32, "big") for i in range(n)],
                                  "medium": "GPU"}],
    # many media and DP-rank-like labels
    "distinct media": lambda n: [{"type": "BlockStored", "block_hashes": [i],
                                  "medium": f"M{i}"} for i in range(n)],
    "clears": lambda n: [{"type": "AllBlocksCleared"} for _ in range(n)],
}


def apply_frames(raw: list[bytes]) -> None:
    KvBlockTracker().apply_message(read_message(raw))


@pytest.mark.parametrize("shape", list(KV_SHAPES))
def test_kv_event_frames_cost_linear(shape: str) -> None:
    make = KV_SHAPES[shape]
    # decoding + applying: ~40 B of Python objects per input byte at most
    assert_linear(f"KV frames, {shape}", lambda n: frames(make(n))[2],
                  lambda payload: apply_frames([b"", (0).to_bytes(8, "big"), payload]),
                  1_000, mem_per_byte=60)


@pytest.mark.parametrize("shape", list(KV_SHAPES))
def test_the_largest_kv_batch_holds_the_loop_briefly(shape: str) -> None:
    """A batch as large as the subscriber reads (2 MiB): decoding runs in the decoder
    thread; what runs on the loop is the tracker's apply, bounded by the per-batch caps."""
    make = KV_SHAPES[shape]
    per_event = len(frames(make(1_000))[2]) / 1_000
    raw = frames(make(int(MAX_FRAME / per_event * 0.95)))
    assert len(raw[2]) <= MAX_FRAME
    msg = read_message(raw)  # off the loop in the product
    t = cpu(lambda: KvBlockTracker().apply_message(msg), repeat=1)
    assert t <= LOOP_CPU_S, f"{shape}: {t:.2f} s of CPU on the loop for {len(raw[2])} B"


# --- /metrics bodies ----------------------------------------------------------------------

METRICS_SHAPES: dict[str, Callable[[int], bytes]] = {
    # series the parser keeps, each with a new engine (at most MAX_KEPT_LINES kept)
    "used series": lambda n: "".join(
        f'vllm:num_requests_running{{engine="{i}",model_name="m"}} 1\n'
        for i in range(min(n, reading.MAX_KEPT_LINES))).encode() + b"python_x 1\n" * n,
    # what a real vLLM has most of: histogram buckets (dropped as they stream)
    "histogram buckets": lambda n: "".join(
        f'vllm:e2e_request_latency_seconds_bucket{{le="{i}",model_name="m"}} {i}\n'
        for i in range(n)).encode(),
    # one line longer than any sample (skipped unread past 64 KiB)
    "one long line": lambda n: b"vllm:kv_cache_usage_perc{a=\"" + b"x" * (40 * n) + b"\"} 1\n",
    "comments": lambda n: b"# HELP vllm:x y\n# TYPE vllm:x gauge\n" * n,
}


class Body:
    """An aiohttp response's content as ``read_capped`` sees it: 64 KiB chunks."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.content_length = None
        self.content = self

    async def iter_chunked(self, n: int) -> Any:
        for i in range(0, len(self.data), n):
            yield self.data[i:i + n]


def read_and_parse(body: bytes) -> None:
    import asyncio

    async def go() -> bytes:
        return await reading.read_capped(Body(body), 64 << 20, filter_lines=True)  # type: ignore[arg-type]

    text = asyncio.run(go())
    vm.parse_vllm_metrics(text.decode("utf-8", "replace"))


@pytest.mark.parametrize("shape", list(METRICS_SHAPES))
def test_metrics_body_cost_linear(shape: str) -> None:
    # streaming filter + parse: the body is never held whole (<= 4 B per input byte), and
    # the parse of at most MAX_KEPT_LINES lines (~1 KiB each) is a fixed 8 MiB at most
    assert_linear(f"/metrics, {shape}", METRICS_SHAPES[shape], read_and_parse, 2_000,
                  mem_per_byte=4, fixed=8 << 20)


def kept(body: bytes) -> bytes:
    import asyncio

    return asyncio.run(reading.read_capped(Body(body), 8 << 20, filter_lines=True))  # type: ignore[arg-type]


@pytest.mark.parametrize("shape", list(METRICS_SHAPES))
def test_the_largest_metrics_slice_and_parse_hold_the_loop_briefly(shape: str) -> None:
    """The filter of one 64 KiB slice, and the parse of the most an 8 MiB body keeps."""
    body = METRICS_SHAPES[shape](120_000)[:8 << 20]
    slice_cpu = cpu(lambda: reading.kept_lines(body[:64 << 10]))
    assert slice_cpu <= LOOP_CPU_S / 10, f"{shape}: {slice_cpu:.3f} s for one slice"
    text = kept(body).decode()
    parse_cpu = cpu(lambda: vm.parse_vllm_metrics(text), repeat=1)
    assert parse_cpu <= LOOP_CPU_S, f"{shape}: parse {parse_cpu:.2f} s"


# --- /kv_event_sources ----------------------------------------------------------------

SOURCES_SHAPES: dict[str, Callable[[int], bytes]] = {
    "many ranks": lambda n: json.dumps({str(i): {
        "enable_kv_cache_events": True, "publisher": "zmq",
        "endpoint": f"tcp://*:{5557 + i % 1000}", "replay_endpoint": "tcp://*:5558"}
        for i in range(n)}).encode(),
    "deep junk": lambda n: json.dumps({"0": {"x": [[1] * 10] * n}}).encode(),
    "long strings": lambda n: json.dumps({str(i): {"endpoint": "tcp://*:" + "9" * 200,
                                                   "enable_kv_cache_events": True,
                                                   "publisher": "zmq"}
                                          for i in range(n)}).encode(),
}


def parse_sources(raw: bytes) -> None:
    parse_kv_event_sources(json.loads(raw), "10.0.0.1")


@pytest.mark.parametrize("shape", list(SOURCES_SHAPES))
def test_kv_event_sources_cost_linear(shape: str) -> None:
    assert_linear(f"/kv_event_sources, {shape}", SOURCES_SHAPES[shape], parse_sources, 500,
                  mem_per_byte=40)


@pytest.mark.parametrize("shape", list(SOURCES_SHAPES))
def test_the_largest_kv_event_sources_hold_the_loop_briefly(shape: str) -> None:
    """The largest answer read (1 MiB: fetch_kv_event_sources's cap), parsed whole."""
    per_item = len(SOURCES_SHAPES[shape](100)) / 100
    raw = SOURCES_SHAPES[shape](int((1 << 20) / per_item * 0.95))
    assert len(raw) <= 1 << 20
    t = cpu(lambda: parse_sources(raw), repeat=1)
    assert t <= LOOP_CPU_S, f"{shape}: {t:.2f} s of CPU for {len(raw)} B"
