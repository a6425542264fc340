"""Live prefix-cache blocks per engine, counted from vLLM's KV cache events (ZMQ).

Wire format (vllm/distributed/kv_events.py, ZmqEventPublisher): each message has three
frames: topic, an 8-byte big-endian sequence number, and a msgpack ``EventBatch``. The batch
is a msgspec struct with ``array_like=True``: ``[ts, events, data_parallel_rank]`` (the rank
omitted when it is the default). Events are tagged structs, tag first in the legacy array
layout (``["BlockStored", block_hashes, parent, token_ids, block_size, lora_id, medium,
...]``) and a map with a ``"type"`` key in 0.2x+ (``{"type": "BlockStored", "block_hashes":
..., "medium": "GPU", "group_idx": 0}``); both are read. Hashes are ints (old) or bytes.

Replay: a DEALER socket sends ``[b"", start_seq(8 bytes)]`` to the ROUTER replay endpoint;
it answers one message per buffered batch from ``start_seq`` on, then an end marker with
sequence -1 (signed 8 bytes). 0.32 answers ``[b"", topic, seq, payload]`` and ends with
``[b"", b"", -1, b""]``; older releases leave the topic out (``[b"", seq, payload]``, end
``[b"", -1, b""]``). Both are read. (A REQ socket would get only the first reply.)

``KvBlockTracker`` is the pure state machine: set semantics per (engine, medium, group),
gap detection with held batches until a replay fills the hole, reset when the sequence
goes backwards (the engine restarted and its publisher counts from 0 again), a cap on
hashes, garbage counted and skipped. ``KvEventSubscriber`` is the thin zmq.asyncio loop.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
import zmq
import zmq.asyncio

from exporter.collectors.vllm.discovery import KvEventEndpoint

log = logging.getLogger(__name__)

END_SEQ = -1
DEFAULT_MAX_BLOCKS = 1_000_000  # per tracker (one publisher = one engine); ~70 MB of ints
DEFAULT_MAX_HELD = 10_000  # live batches held while a replay fills a gap


class KvEventDecodeError(ValueError):
    """A frame or payload that is not a vLLM KV event batch."""


# --- decoding ------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockStored:
    hashes: tuple[int, ...]  # Python hash() of each block hash: compact, stable per process
    medium: str  # "gpu", "cpu", ... (lowercase; None on old releases means gpu)
    group: int | None


@dataclass(frozen=True)
class BlockRemoved:
    hashes: tuple[int, ...]
    medium: str
    group: int | None


@dataclass(frozen=True)
class AllBlocksCleared:
    pass


KvEvent = BlockStored | BlockRemoved | AllBlocksCleared


@dataclass(frozen=True)
class KvEventBatch:
    ts: float
    events: tuple[KvEvent, ...]
    dp_rank: int | None


def _hashes(raw: Any) -> tuple[int, ...]:
    if not isinstance(raw, list):
        raise KvEventDecodeError(f"block_hashes is {type(raw).__name__}, not a list")
    for h in raw:
        if not isinstance(h, int | bytes | str):
            raise KvEventDecodeError(f"block hash of type {type(h).__name__}")
    # hash() keeps ints as they are and folds 32-byte digests to 64 bits: a collision
    # among a million live blocks has odds of about 1 in 10^7.
    return tuple(hash(h) for h in raw)


def _medium(raw: Any) -> str:
    return raw.lower() if isinstance(raw, str) and raw else "gpu"


def _group(raw: Any) -> int | None:
    return raw if isinstance(raw, int) and not isinstance(raw, bool) else None


def _at(seq: Sequence[Any], i: int) -> Any:
    return seq[i] if i < len(seq) else None


def _decode_event(raw: Any) -> KvEvent | None:
    """One event; None for an event type this version of headroom does not know."""
    if isinstance(raw, Mapping):
        tag = raw.get("type")
        if tag == "BlockStored":
            return BlockStored(
                _hashes(raw.get("block_hashes")), _medium(raw.get("medium")),
                _group(raw.get("group_idx")),
            )
        if tag == "BlockRemoved":
            return BlockRemoved(
                _hashes(raw.get("block_hashes")), _medium(raw.get("medium")),
                _group(raw.get("group_idx")),
            )
    elif isinstance(raw, list) and raw and isinstance(raw[0], str):
        tag = raw[0]
        # legacy array layout: fields in declaration order after the tag
        if tag == "BlockStored":
            return BlockStored(_hashes(_at(raw, 1)), _medium(_at(raw, 6)), _group(_at(raw, 9)))
        if tag == "BlockRemoved":
            return BlockRemoved(_hashes(_at(raw, 1)), _medium(_at(raw, 2)), _group(_at(raw, 3)))
    else:
        raise KvEventDecodeError(f"event is {type(raw).__name__}, not a tagged struct")
    if tag == "AllBlocksCleared":
        return AllBlocksCleared()
    if not isinstance(tag, str):
        raise KvEventDecodeError(f"event tag {tag!r}")
    return None


def decode_batch(payload: bytes) -> KvEventBatch:
    """msgpack ``[ts, events, dp_rank?]`` -> ``KvEventBatch``; ``KvEventDecodeError`` if not."""
    try:
        raw = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise KvEventDecodeError(f"not msgpack: {exc!r}") from exc
    if isinstance(raw, Mapping):  # a publisher without array_like (not seen, cheap to take)
        raw = [raw.get("ts"), raw.get("events"), raw.get("data_parallel_rank")]
    if not isinstance(raw, list) or len(raw) < 2 or not isinstance(raw[1], list):
        raise KvEventDecodeError("payload is not [ts, events, dp_rank]")
    ts, events = raw[0], raw[1]
    if not isinstance(ts, int | float):
        raise KvEventDecodeError(f"ts is {type(ts).__name__}")
    rank = _at(raw, 2)
    decoded = tuple(e for e in map(_decode_event, events) if e is not None)
    return KvEventBatch(float(ts), decoded, rank if isinstance(rank, int) else None)


def replay_frames(frames: Sequence[bytes]) -> list[bytes] | None:
    """A DEALER reply as ``[topic, seq, payload]``: ``[b"", topic, seq, payload]`` (0.32)
    or ``[b"", seq, payload]`` (older, no topic). None when it is neither."""
    if len(frames) == 4 and frames[0] == b"":
        return list(frames[1:])
    if len(frames) == 3 and frames[0] == b"":
        return [b"", frames[1], frames[2]]
    return None


def is_replay_end(frames: Sequence[bytes]) -> bool:
    body = replay_frames(frames)
    return body is not None and body[1] == END_SEQ.to_bytes(8, "big", signed=True)


# --- the state machine -----------------------------------------------------------------


class Outcome(enum.Enum):
    APPLIED = "applied"
    DUPLICATE = "duplicate"  # a replayed batch we already have
    GAP = "gap"  # a live batch after a hole: held; replay from ``replay_from``, then replay_done
    HELD = "held"  # a live batch held while a replay runs
    RESET = "reset"  # the sequence went backwards: the engine restarted, state cleared
    GARBAGE = "garbage"  # undecodable frames or payload, skipped


@dataclass
class TrackerStats:
    batches: int = 0
    garbage: int = 0
    duplicates: int = 0
    gaps: int = 0
    lost_batches: int = 0  # sequence numbers never seen (replay buffer too short, no replay)
    resets: int = 0
    overflow_blocks: int = 0  # stores dropped at the cap


GroupKey = tuple[str, str, int | None]  # (engine, medium, group)


@dataclass
class KvBlockTracker:
    """Live block hashes of one publisher (one engine), fed batch by batch.

    ``default_engine`` labels batches that carry no dp_rank. ``max_blocks`` bounds memory:
    stores beyond it are dropped and counted (the count is then a lower bound); set it from
    the engine's capacity with ``set_capacity``.
    """

    default_engine: str = "0"
    max_blocks: int = DEFAULT_MAX_BLOCKS
    max_held: int = DEFAULT_MAX_HELD
    stats: TrackerStats = field(default_factory=TrackerStats)
    last_seq: int | None = None
    _blocks: dict[GroupKey, set[int]] = field(default_factory=dict)
    _total: int = 0
    _holding: bool = False
    _held: list[tuple[int, KvEventBatch]] = field(default_factory=list)
    _overflow_logged: bool = False

    # -- queries --
    def prefix_cache_blocks(self) -> dict[tuple[str, str], int]:
        """(engine, medium) -> live blocks, summed over KV cache groups."""
        out: dict[tuple[str, str], int] = {}
        for (engine, medium, _), hashes in self._blocks.items():
            out[(engine, medium)] = out.get((engine, medium), 0) + len(hashes)
        return out

    @property
    def replay_from(self) -> int:
        """First sequence number missing (0 before any batch)."""
        return 0 if self.last_seq is None else self.last_seq + 1

    @property
    def holding(self) -> bool:
        return self._holding

    def set_capacity(self, blocks: int) -> None:
        """Cap from what vLLM says it can hold (all media); headroom for one batch's churn."""
        self.max_blocks = max(blocks + blocks // 10 + 64, 64)

    # -- feeding --
    def begin_replay(self) -> None:
        """Hold live batches until ``replay_done`` (used for the start-up history replay)."""
        self._holding = True

    def apply_frames(self, frames: Sequence[bytes], *, replay: bool = False) -> Outcome:
        """A SUB message ``[topic, seq, payload]`` or a replay reply (see ``replay_frames``)."""
        if replay:
            frames = replay_frames(frames) or [b"", b"", b""]
        if len(frames) != 3 or len(frames[1]) != 8:
            return self._garbage(f"{len(frames)} frames", None, replay)
        seq = int.from_bytes(frames[1], "big", signed=True)
        return self.apply(seq, frames[2], replay=replay)

    def apply(self, seq: int, payload: bytes, *, replay: bool = False) -> Outcome:
        try:
            batch = decode_batch(payload)
        except KvEventDecodeError as exc:
            return self._garbage(str(exc), seq, replay)
        if replay:
            return self._apply_replayed(seq, batch)
        if self._holding:
            self._hold(seq, batch)
            return Outcome.HELD
        if self.last_seq is None or seq == self.last_seq + 1:
            self._commit(seq, batch)
            return Outcome.APPLIED
        if seq <= self.last_seq:
            log.info("KV events: sequence went back from %d to %d: engine restarted, "
                     "starting over", self.last_seq, seq)
            self.clear()
            self.stats.resets += 1
            self._commit(seq, batch)
            return Outcome.RESET
        self.stats.gaps += 1
        self._holding = True
        self._hold(seq, batch)
        return Outcome.GAP

    def replay_done(self) -> None:
        """The replay ended (or timed out, or there is none): apply what was held, in order."""
        self._holding = False
        held, self._held = sorted(self._held, key=lambda x: x[0]), []
        for seq, batch in held:
            if self.last_seq is not None and seq <= self.last_seq:
                self.stats.duplicates += 1
                continue
            if self.last_seq is not None and seq > self.last_seq + 1:
                self.stats.lost_batches += seq - self.last_seq - 1
            self._commit(seq, batch)

    def clear(self) -> None:
        self._blocks.clear()
        self._total = 0
        self._held.clear()
        self.last_seq = None

    # -- internals --
    def _apply_replayed(self, seq: int, batch: KvEventBatch) -> Outcome:
        if self.last_seq is not None and seq <= self.last_seq:
            self.stats.duplicates += 1
            return Outcome.DUPLICATE
        if self.last_seq is not None and seq > self.last_seq + 1:
            self.stats.lost_batches += seq - self.last_seq - 1  # the buffer no longer had them
        self._commit(seq, batch)
        return Outcome.APPLIED

    def _hold(self, seq: int, batch: KvEventBatch) -> None:
        if len(self._held) >= self.max_held:
            self._held.pop(0)
            self.stats.lost_batches += 1
        self._held.append((seq, batch))

    def _garbage(self, why: str, seq: int | None, replay: bool) -> Outcome:
        self.stats.garbage += 1
        if self.stats.garbage == 1 or self.stats.garbage % 1000 == 0:
            log.warning("KV events: skipped %d bad message(s), latest: %s",
                        self.stats.garbage, why[:200])
        # a readable sequence still moves on, so the next batch is not taken for a gap
        if seq is not None and not replay and not self._holding and (
            self.last_seq is None or seq == self.last_seq + 1
        ):
            self.last_seq = seq
            self.stats.lost_batches += 1
        return Outcome.GARBAGE

    def _commit(self, seq: int, batch: KvEventBatch) -> None:
        self.last_seq = seq
        self.stats.batches += 1
        engine = str(batch.dp_rank) if batch.dp_rank is not None else self.default_engine
        for ev in batch.events:
            if isinstance(ev, AllBlocksCleared):
                # vLLM sends it when the prefix cache is reset; it names no medium. The
                # sets are emptied, not dropped: the count reads 0 (absent would mean
                # that events are off, and a vanished series freezes dashboards).
                for key in [k for k in self._blocks if k[0] == engine]:
                    self._total -= len(self._blocks[key])
                    self._blocks[key].clear()
            elif isinstance(ev, BlockStored):
                self._store(self._blocks.setdefault((engine, ev.medium, ev.group), set()), ev)
            else:
                live = self._blocks.get((engine, ev.medium, ev.group))
                if live:
                    before = len(live)
                    live.difference_update(ev.hashes)
                    self._total -= before - len(live)

    def _store(self, live: set[int], ev: BlockStored) -> None:
        for h in ev.hashes:
            if h in live:
                continue
            if self._total >= self.max_blocks:
                self.stats.overflow_blocks += 1
                if not self._overflow_logged:
                    log.warning("KV events: more than %d live blocks; dropping new ones (the "
                                "count is a lower bound from now on)", self.max_blocks)
                    self._overflow_logged = True
                continue
            live.add(h)
            self._total += 1


# --- the subscriber --------------------------------------------------------------------


@dataclass
class KvEventSubscriber:
    """Follows one publisher (one DP rank) into a ``KvBlockTracker`` until cancelled.

    On start it asks the replay endpoint for everything still buffered (from 0), so a
    restarted exporter learns the blocks cached before it came up, as far as vLLM's buffer
    (buffer_steps batches) reaches. An unreachable endpoint is not an error: ZMQ keeps
    reconnecting and the tracker stays empty.
    """

    source: KvEventEndpoint
    tracker: KvBlockTracker = field(default_factory=KvBlockTracker)
    replay_timeout: float = 2.0
    ctx: zmq.asyncio.Context | None = None

    def __post_init__(self) -> None:
        if self.tracker.default_engine == "0":
            self.tracker.default_engine = str(self.source.dp_rank)

    def prefix_cache_blocks(self) -> dict[tuple[str, str], int]:
        return self.tracker.prefix_cache_blocks()

    async def run(self) -> None:
        ctx = self.ctx or zmq.asyncio.Context.instance()
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.RCVHWM, 100_000)
        sub.connect(self.source.endpoint)
        sub.setsockopt(zmq.SUBSCRIBE, self.source.topic.encode())
        try:
            if self.source.replay_endpoint:
                await self._replay(ctx, sub, 0)
            while True:
                frames = await sub.recv_multipart()
                outcome = self.tracker.apply_frames(frames)
                if outcome is Outcome.GAP:
                    if self.source.replay_endpoint:
                        await self._replay(ctx, sub, self.tracker.replay_from)
                    else:
                        self.tracker.replay_done()  # nothing to ask: accept the loss
                elif outcome is Outcome.RESET and self.tracker.last_seq and (
                    self.source.replay_endpoint
                ):
                    # restarted and we missed its first batches: fetch them from 0
                    self.tracker.clear()
                    await self._replay(ctx, sub, 0)
        finally:
            sub.close(linger=0)

    async def _replay(self, ctx: zmq.asyncio.Context, sub: zmq.asyncio.Socket, start: int) -> None:
        """Fetch buffered batches from ``start`` while holding live ones, then apply in order."""
        assert self.source.replay_endpoint is not None
        self.tracker.begin_replay()
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(self.source.replay_endpoint)
        poller = zmq.asyncio.Poller()
        poller.register(sub, zmq.POLLIN)
        poller.register(dealer, zmq.POLLIN)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.replay_timeout
        try:
            await dealer.send_multipart([b"", start.to_bytes(8, "big", signed=True)])
            while (left := deadline - loop.time()) > 0:
                ready = dict(await poller.poll(timeout=left * 1000))
                if sub in ready:
                    self.tracker.apply_frames(await sub.recv_multipart())
                if dealer in ready:
                    frames = await dealer.recv_multipart()
                    if is_replay_end(frames):
                        break
                    self.tracker.apply_frames(frames, replay=True)
                    deadline = loop.time() + self.replay_timeout  # still streaming
            else:
                log.info("KV events: no replay answer from %s within %.1fs",
                         self.source.replay_endpoint, self.replay_timeout)
        finally:
            dealer.close(linger=0)
            self.tracker.replay_done()


@dataclass
class KvEventsHub:
    """One subscriber per KV-event endpoint of each vLLM instance, kept in step with discovery.

    ``key`` names a vLLM instance (e.g. its /metrics URL). Call ``ensure`` on each discovery
    pass with the endpoints seen (an empty tuple stops them); read ``prefix_cache_blocks``
    at scrape time. Must be used from one event loop.
    """

    replay_timeout: float = 2.0
    _subs: dict[str, dict[KvEventEndpoint, tuple[KvEventSubscriber, asyncio.Task[None]]]] = (
        field(default_factory=dict)
    )

    def ensure(self, key: str, endpoints: Sequence[KvEventEndpoint]) -> None:
        current = self._subs.setdefault(key, {})
        for ep in set(current) - set(endpoints):
            current.pop(ep)[1].cancel()
        for ep in endpoints:
            if ep not in current or current[ep][1].done():
                sub = KvEventSubscriber(ep, replay_timeout=self.replay_timeout)
                task = asyncio.create_task(sub.run(), name=f"kv-events {ep.endpoint}")
                task.add_done_callback(_log_task_end)
                current[ep] = (sub, task)
        if not current:
            del self._subs[key]

    def prefix_cache_blocks(self, key: str) -> dict[tuple[str, str], int]:
        """(engine, medium) -> live blocks over all endpoints of that instance."""
        out: dict[tuple[str, str], int] = {}
        for sub, _ in self._subs.get(key, {}).values():
            for k, n in sub.prefix_cache_blocks().items():
                out[k] = out.get(k, 0) + n
        return out

    def instances(self) -> list[str]:
        """The vLLM instances followed."""
        return sorted(self._subs)

    async def close(self) -> None:
        tasks = [t for subs in self._subs.values() for _, t in subs.values()]
        self._subs.clear()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _log_task_end(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("KV events: %s stopped: %r", task.get_name(), task.exception())
