"""What one pod can make the vLLM source spend is bounded (issue 23, R1-R5): each test
plays one attack of the second red-team round and checks the bound that stops it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import msgpack
import pytest

from exporter.collectors.vllm.kv_events import KvBlockTracker, LostReason, decode_batch

REPO = Path(__file__).resolve().parent.parent


def packed(events: list[Any], rank: int = 0) -> bytes:
    return bytes(msgpack.packb([1.0, events, rank], use_bin_type=True))


def stored(h: int, group: int) -> dict[str, Any]:
    return {"type": "BlockStored", "block_hashes": [h], "medium": "GPU", "group_idx": group}


# --- R1: one KV-event batch costs work linear in its size, bounded --------------------


def test_r1_kv_cache_groups_per_medium_are_bounded() -> None:
    """20,000 distinct ``group_idx`` in one ~1 MB batch (the attack cost 9 s of CPU on the
    event loop): a few groups are followed, the other stores counted as overflow."""
    t = KvBlockTracker()
    t.apply(0, packed([stored(i, i) for i in range(20_000)]))
    assert sum(t.prefix_cache_blocks().values()) <= 64
    assert t.stats.lost()[LostReason.OVERFLOW] >= 20_000 - 64
    assert t.prefix_cache_blocks(exact_only=True) == {}  # an overflowed count is not exact


def test_r1_events_per_batch_are_bounded() -> None:
    """A batch of 200,000 tiny events: decoding keeps a bounded number, the rest counted."""
    raw = packed([["BlockRemoved", [i & 0xFF], None] for i in range(200_000)])
    batch = decode_batch(raw)
    assert len(batch.events) <= 65_536
    t = KvBlockTracker()
    t.apply(0, raw)
    assert t.stats.lost()[LostReason.OVERFLOW] >= 200_000 - 65_536


# --- R2: no message bigger than a few MiB is ever taken in ---------------------------

BOMB = textwrap.dedent("""
    import asyncio, os, signal, socket, sys, time
    FRAMES, FRAME = int(sys.argv[1]), int(sys.argv[2])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    child = os.fork()
    if child == 0:  # the publisher: its memory is not the subscriber's
        import zmq
        pub = zmq.Context().socket(zmq.PUB)
        pub.setsockopt(zmq.SNDHWM, 0)
        pub.bind(f"tcp://127.0.0.1:{port}")
        time.sleep(2)
        body = bytearray(FRAME)  # zero-copy: one buffer, sent FRAMES times
        for _ in range(FRAMES - 1):
            pub.send(body, zmq.SNDMORE, copy=False)
        pub.send(body, copy=False)
        time.sleep(30)
        os._exit(0)

    from exporter.collectors.vllm.discovery import KvEventEndpoint
    from exporter.collectors.vllm.kv_subscriber import KvEventSubscriber

    async def main():
        sub = KvEventSubscriber(KvEventEndpoint(0, f"tcp://127.0.0.1:{port}"))
        task = asyncio.create_task(sub.run())
        end = time.monotonic() + 40  # the message is taken whole, or the peer dropped
        while time.monotonic() < end and sub.tracker.stats.garbage == 0 and (
                sub.tracker.stats.batches == 0):
            await asyncio.sleep(0.05)
        task.cancel()
        # VmHWM, not ru_maxrss: that one keeps the peak of the process before its exec
        with open("/proc/self/status") as f:
            hwm = next(int(x.split()[1]) for x in f if x.startswith("VmHWM:")) // 1024
        print(sub.tracker.stats.garbage, hwm, flush=True)

    try:
        asyncio.run(main())
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
""")


@pytest.mark.parametrize(("frames", "frame_bytes"), [(1, 300 << 20), (400, 512 << 10)],
                         ids=["one-300MiB-frame", "400-frames-of-512KiB"])
def test_r2_a_huge_message_is_refused_before_it_is_read(frames: int, frame_bytes: int) -> None:
    """A publisher sends one 300 MiB frame (OOM-killed the exporter within a second), or
    400 frames of 512 KiB in one message (libzmq's MAXMSGSIZE bounds frames, not
    messages): the subscriber drops the peer, counts it as garbage, and its process never
    holds the message (peak RSS stays far below it)."""
    out = subprocess.run([sys.executable, "-c", BOMB, str(frames), str(frame_bytes)],
                         cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    garbage, peak_mib = map(int, out.stdout.split())
    assert garbage >= 1, out.stdout
    assert peak_mib < 120, f"peak RSS {peak_mib} MiB for a {frames * frame_bytes >> 20} MiB message"
