"""KV cache events: decoding, the block tracker state machine, and a real ZMQ subscriber."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import msgpack
import pytest
import zmq
import zmq.asyncio

from exporter.collectors.vllm.discovery import KvEventEndpoint
from exporter.collectors.vllm.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KvBlockTracker,
    KvEventDecodeError,
    KvEventsHub,
    KvEventSubscriber,
    Outcome,
    decode_batch,
    is_replay_end,
)

H = [bytes([i]) * 32 for i in range(64)]  # sha256-sized block hashes, as vLLM 0.2x+ sends


# Payloads as vLLM's msgspec encoder writes them: EventBatch array_like; events as maps
# with a "type" tag (0.2x+) or, in the legacy layout, arrays with the tag first.
def stored(hashes: Sequence[Any], medium: str | None = "GPU", group: int | None = None) -> Any:
    ev: dict[str, Any] = {"type": "BlockStored", "block_hashes": list(hashes),
                          "parent_block_hash": None, "token_ids": [1] * 16 * len(hashes),
                          "block_size": 16, "lora_id": None, "medium": medium,
                          "lora_name": None}
    if group is not None:
        ev["group_idx"] = group
    return ev


def removed(hashes: Sequence[Any], medium: str = "GPU") -> Any:
    return {"type": "BlockRemoved", "block_hashes": list(hashes), "medium": medium}


CLEARED = {"type": "AllBlocksCleared"}


def batch(*events: Any, rank: int | None = 0, ts: float = 1.5) -> bytes:
    body: list[Any] = [ts, list(events)]
    if rank is not None:
        body.append(rank)
    return bytes(msgpack.packb(body, use_bin_type=True))


def blocks(t: KvBlockTracker) -> dict[tuple[str, str], int]:
    return t.prefix_cache_blocks()


# --- decoding ------------------------------------------------------------------------


def test_decode_map_layout() -> None:
    b = decode_batch(batch(stored(H[:2], group=1), removed(H[:1]), CLEARED, rank=3))
    assert b.dp_rank == 3 and b.ts == 1.5
    assert b.events[0] == BlockStored((hash(H[0]), hash(H[1])), "gpu", 1)
    assert b.events[1] == BlockRemoved((hash(H[0]),), "gpu", None)
    assert b.events[2] == AllBlocksCleared()


def test_decode_legacy_array_layout() -> None:
    payload = msgpack.packb([2.0, [
        ["BlockStored", [11, 12], None, [1, 2], 16, None],  # 0.8/0.9: no medium field
        ["BlockStored", [13], 12, [3], 16, None, "CPU"],
        ["BlockRemoved", [11], "GPU"],
        ["AllBlocksCleared"],
    ]])
    b = decode_batch(payload)
    assert b.dp_rank is None
    assert b.events == (
        BlockStored((11, 12), "gpu", None), BlockStored((13,), "cpu", None),
        BlockRemoved((11,), "gpu", None), AllBlocksCleared(),
    )


def test_unknown_event_types_are_skipped() -> None:
    assert decode_batch(batch({"type": "SomethingNew", "x": 1})).events == ()


@pytest.mark.parametrize("payload", [
    b"\xc1garbage", msgpack.packb({"a": 1}), msgpack.packb([1.0, "x"]), msgpack.packb("str"),
    msgpack.packb([1.0, [{"type": "BlockStored", "block_hashes": "nope"}]]),
    msgpack.packb([1.0, [42]]), msgpack.packb(["ts", []]),
])
def test_decode_garbage(payload: bytes) -> None:
    with pytest.raises(KvEventDecodeError):
        decode_batch(payload)


# --- the tracker ---------------------------------------------------------------------


def test_set_semantics() -> None:
    t = KvBlockTracker()
    assert t.apply(0, batch(stored(H[:3]))) is Outcome.APPLIED
    assert t.apply(1, batch(stored(H[1:4]))) is Outcome.APPLIED  # duplicates count once
    assert blocks(t) == {("0", "gpu"): 4}
    t.apply(2, batch(removed([H[0], H[50]])))  # removing an unknown hash is harmless
    assert blocks(t) == {("0", "gpu"): 3}
    t.apply(3, batch(stored(H[10:12], medium="CPU"), stored(H[10:12], group=1)))
    assert blocks(t) == {("0", "gpu"): 5, ("0", "cpu"): 2}  # groups summed per medium
    t.apply(4, batch(CLEARED))
    assert blocks(t) == {("0", "gpu"): 0, ("0", "cpu"): 0}  # read 0, not absent


def test_engine_from_dp_rank_else_default() -> None:
    t = KvBlockTracker(default_engine="2")
    t.apply(0, batch(stored(H[:1]), rank=None))
    t.apply(1, batch(stored(H[1:3]), rank=1))
    assert blocks(t) == {("2", "gpu"): 1, ("1", "gpu"): 2}


def test_gap_is_held_until_the_replay_fills_it() -> None:
    t = KvBlockTracker()
    t.apply(0, batch(stored(H[:2])))
    assert t.apply(3, batch(removed(H[2:3]))) is Outcome.GAP
    assert t.replay_from == 1 and t.holding
    assert t.apply(4, batch(stored(H[5:6]))) is Outcome.HELD
    assert blocks(t) == {("0", "gpu"): 2}  # nothing applied out of order
    # the replay streams from 1; 0 was already applied
    assert t.apply(0, batch(stored(H[:2])), replay=True) is Outcome.DUPLICATE
    assert t.apply(1, batch(stored(H[2:3])), replay=True) is Outcome.APPLIED
    assert t.apply(2, batch(removed(H[:1])), replay=True) is Outcome.APPLIED
    t.replay_done()
    # store H2 (1) then remove it (3): order kept, so H2 is gone; H1 and H5 live
    assert blocks(t) == {("0", "gpu"): 2}
    assert t.last_seq == 4 and t.stats.lost_batches == 0 and t.stats.gaps == 1


def test_gap_without_replay_counts_the_loss() -> None:
    t = KvBlockTracker()
    t.apply(0, batch(stored(H[:1])))
    assert t.apply(5, batch(stored(H[1:2]))) is Outcome.GAP
    t.replay_done()
    assert blocks(t) == {("0", "gpu"): 2} and t.stats.lost_batches == 4


def test_sequence_going_back_is_a_restart() -> None:
    t = KvBlockTracker()
    for seq in range(3):
        t.apply(seq, batch(stored(H[seq * 3:seq * 3 + 3])))
    assert blocks(t) == {("0", "gpu"): 9}
    assert t.apply(0, batch(stored(H[40:41]))) is Outcome.RESET
    assert blocks(t) == {("0", "gpu"): 1} and t.stats.resets == 1 and t.last_seq == 0


def test_cap_bounds_memory_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    t = KvBlockTracker(max_blocks=10)
    with caplog.at_level(logging.WARNING):
        t.apply(0, batch(stored(H[:8])))
        t.apply(1, batch(stored(H[8:20])))
        t.apply(2, batch(stored(H[20:30])))
    assert blocks(t) == {("0", "gpu"): 10}
    assert t.stats.overflow_blocks == 20
    assert len([r for r in caplog.records if "lower bound" in r.message]) == 1
    t.apply(3, batch(removed(H[:5])))
    t.apply(4, batch(stored(H[40:45])))  # room again after removals
    assert blocks(t) == {("0", "gpu"): 10}


def test_set_capacity() -> None:
    t = KvBlockTracker()
    t.set_capacity(1000)
    assert 1000 < t.max_blocks < 1200


def test_garbage_frames_are_counted_and_skipped() -> None:
    t = KvBlockTracker()
    assert t.apply_frames([b"", (0).to_bytes(8, "big"), batch(stored(H[:1]))]) is Outcome.APPLIED
    assert t.apply_frames([b"only one frame"]) is Outcome.GARBAGE
    assert t.apply_frames([b"", b"\x01", b"x"]) is Outcome.GARBAGE  # seq not 8 bytes
    assert t.apply_frames([b"", (1).to_bytes(8, "big"), b"\xc1\xc1"]) is Outcome.GARBAGE
    # the garbage batch used seq 1, so seq 2 is in order, not a gap
    assert t.apply_frames([b"", (2).to_bytes(8, "big"), batch(stored(H[1:2]))]) is Outcome.APPLIED
    assert t.stats.garbage == 3 and blocks(t) == {("0", "gpu"): 2}


@pytest.mark.parametrize("with_topic", [True, False])
def test_replay_reply_layouts(with_topic: bool) -> None:
    """0.32 replies [b"", topic, seq, payload]; older ones [b"", seq, payload]."""
    t = KvBlockTracker()
    topic = [b"kv"] if with_topic else []
    reply = [b"", *topic, (0).to_bytes(8, "big"), batch(stored(H[:2]))]
    assert t.apply_frames(reply, replay=True) is Outcome.APPLIED
    end = [b"", *topic, (-1).to_bytes(8, "big", signed=True), b""]
    assert is_replay_end(end) and not is_replay_end(reply)
    assert t.apply_frames([b"x", b"y"], replay=True) is Outcome.GARBAGE
    assert blocks(t) == {("0", "gpu"): 2}


def test_held_batches_are_bounded() -> None:
    t = KvBlockTracker(max_held=3)
    t.apply(0, batch())
    t.apply(2, batch())
    for seq in range(3, 8):
        t.apply(seq, batch(stored(H[seq:seq + 1])))
    assert len(t._held) == 3  # oldest dropped, counted as lost
    assert t.stats.lost_batches == 3


# --- the subscriber over real ZMQ sockets ---------------------------------------------


class FakeVllm:
    """vLLM's publisher side: PUB on one port, ROUTER (replay) on another, 10-batch buffer."""

    def __init__(self, ctx: zmq.asyncio.Context) -> None:
        self.pub = ctx.socket(zmq.PUB)
        self.router = ctx.socket(zmq.ROUTER)
        self.pub_port = self.pub.bind_to_random_port("tcp://127.0.0.1")
        self.replay_port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.buffer: list[tuple[int, bytes]] = []
        self.replays: list[int] = []
        self._task = asyncio.create_task(self._serve_replay())

    def endpoint(self, replay: bool = True) -> KvEventEndpoint:
        return KvEventEndpoint(0, f"tcp://127.0.0.1:{self.pub_port}",
                               f"tcp://127.0.0.1:{self.replay_port}" if replay else None)

    async def publish(self, seq: int, payload: bytes, *, drop: bool = False) -> None:
        self.buffer = [*self.buffer, (seq, payload)][-10:]
        if not drop:
            await self.pub.send_multipart([b"", seq.to_bytes(8, "big"), payload])

    async def _serve_replay(self) -> None:
        while True:
            ident, _, start = await self.router.recv_multipart()
            first = int.from_bytes(start, "big")
            self.replays.append(first)
            for seq, payload in self.buffer:
                if seq >= first:  # vLLM 0.32's layout: topic frame included
                    await self.router.send_multipart([ident, b"", b"", seq.to_bytes(8, "big"),
                                                      payload])
            await self.router.send_multipart([ident, b"", b"",
                                              (-1).to_bytes(8, "big", signed=True), b""])

    def close(self) -> None:
        self._task.cancel()
        self.pub.close(linger=0)
        self.router.close(linger=0)


@pytest.fixture
async def ctx() -> AsyncIterator[zmq.asyncio.Context]:
    c = zmq.asyncio.Context()
    yield c
    c.term()


async def until(cond: Any, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "condition not met in time"
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def running(sub: KvEventSubscriber) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(sub.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_subscriber_history_live_gap_and_garbage(ctx: zmq.asyncio.Context) -> None:
    vllm = FakeVllm(ctx)
    try:
        # blocks cached before the exporter came up: learned by the start-up replay
        await vllm.publish(0, batch(stored(H[:4])))
        sub = KvEventSubscriber(vllm.endpoint(), ctx=ctx, replay_timeout=1.0)
        async with running(sub):
            await until(lambda: sub.prefix_cache_blocks() == {("0", "gpu"): 4})
            assert vllm.replays == [0]
            # the SUB connection may still be joining: publish until a live batch lands
            seq = 1
            await until(lambda: sub.tracker.last_seq is not None)
            while sub.tracker.last_seq == 0:
                await vllm.publish(seq, batch(stored(H[4 + seq:5 + seq])))
                seq += 1
                await asyncio.sleep(0.05)
            await until(lambda: sub.tracker.last_seq == seq - 1)
            live = 4 + (seq - 1)
            assert sub.prefix_cache_blocks() == {("0", "gpu"): live}
            # a lost message: the next one reveals the gap, the replay fills it
            await vllm.publish(seq, batch(removed(H[:2])), drop=True)
            await vllm.publish(seq + 1, batch(stored(H[40:41])))
            await until(lambda: sub.tracker.last_seq == seq + 1)
            assert vllm.replays[0] == 0 and vllm.replays[-1] == seq
            assert sub.prefix_cache_blocks() == {("0", "gpu"): live - 2 + 1}
            # garbage frames are counted and skipped; the stream goes on
            await vllm.pub.send_multipart([b"junk"])
            await vllm.pub.send_multipart([b"", (seq + 2).to_bytes(8, "big"), b"\xc1"])
            await vllm.publish(seq + 3, batch(CLEARED))
            await until(lambda: sub.tracker.last_seq == seq + 3)
            assert sub.tracker.stats.garbage == 2
            assert sub.prefix_cache_blocks() == {("0", "gpu"): 0}
            # an engine restart: the sequence starts over
            vllm.buffer = []
            await vllm.publish(0, batch(stored(H[50:53])))
            await until(lambda: sub.tracker.stats.resets == 1)
            assert sub.prefix_cache_blocks() == {("0", "gpu"): 3}
            for seq in (1, 2):
                await vllm.publish(seq, batch())
            await until(lambda: sub.tracker.last_seq == 2)
            # another restart whose first batch we miss: replayed from 0
            vllm.buffer = []
            await vllm.publish(0, batch(stored(H[54:56])), drop=True)
            await vllm.publish(1, batch(stored(H[56:57])))
            await until(lambda: sub.tracker.stats.resets == 2 and sub.tracker.last_seq == 1)
            await until(lambda: not sub.tracker.holding)
            assert vllm.replays[-1] == 0
            assert sub.prefix_cache_blocks() == {("0", "gpu"): 3}
    finally:
        vllm.close()


async def test_unreachable_endpoint_is_quiet(ctx: zmq.asyncio.Context) -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    ep = KvEventEndpoint(0, f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{port + 0}")
    sub = KvEventSubscriber(ep, ctx=ctx, replay_timeout=0.3)
    async with running(sub) as task:
        await asyncio.sleep(0.8)
        assert not task.done()  # still waiting (ZMQ reconnects), no exception
    assert sub.prefix_cache_blocks() == {} and not sub.tracker.holding


async def test_hub_follows_discovery(ctx: zmq.asyncio.Context) -> None:
    vllm = FakeVllm(ctx)
    hub = KvEventsHub(replay_timeout=0.5)
    try:
        ep = vllm.endpoint()
        hub.ensure("http://pod-a:8000/metrics", [ep])
        await asyncio.sleep(0.3)
        seq = 0
        while not hub.prefix_cache_blocks("http://pod-a:8000/metrics"):
            await vllm.publish(seq, batch(stored(H[seq:seq + 1])))
            seq += 1
            await asyncio.sleep(0.1)
            assert seq < 50
        hub.ensure("http://pod-a:8000/metrics", [ep])  # same endpoint: the same subscriber
        assert hub.instances() == ["http://pod-a:8000/metrics"]
        hub.ensure("http://pod-a:8000/metrics", [])  # gone from discovery
        assert hub.instances() == [] and hub.prefix_cache_blocks("http://pod-a:8000/metrics") == {}
    finally:
        await hub.close()
        vllm.close()
