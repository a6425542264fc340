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
import zmq.utils.monitor

from exporter.collectors.vllm.discovery import KvEventEndpoint

log = logging.getLogger(__name__)

END_SEQ = -1
DEFAULT_MAX_BLOCKS = 1_000_000  # per tracker (one publisher = one engine); ~70 MB of ints
DEFAULT_MAX_HELD = 10_000  # live batches held while a replay fills a gap


class KvEventDecodeError(ValueError):
    """A frame or payload that is not a vLLM KV event batch."""


# --- decoding ------------------------------------------------------------------------

MAX_DP_RANK = 1 << 16  # a rank beyond this is not a real engine: the batch is garbage
MAX_MEDIUM_CHARS = 16  # vLLM's media are "GPU", "CPU", "STORAGE"
DEVICE_MEDIUM = "gpu"  # vLLM's own block pool: where AllBlocksCleared comes from


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
    """vLLM's block pool was reset (``reset_prefix_cache``, sleep, pause with clear).

    vLLM's event names no medium: only its device block pool sends it (v1/core/block_pool.py
    ``reset_prefix_cache``); the CPU offload tier's manager resets without any event. A
    medium, should a later release add one, is honoured."""

    medium: str = DEVICE_MEDIUM


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
        if not isinstance(h, int | bytes | str) or isinstance(h, bool):
            raise KvEventDecodeError(f"block hash of type {type(h).__name__}")
    # hash() keeps ints as they are and folds 32-byte digests to 64 bits: a collision
    # among a million live blocks has odds of about 1 in 10^7.
    return tuple(hash(h) for h in raw)


def _medium(raw: Any) -> str:
    """Lowercase medium; None (releases before media) is the device. Anything that could
    not be a medium name makes the batch garbage: it would become a label value."""
    if raw is None or raw == "":
        return DEVICE_MEDIUM
    if (not isinstance(raw, str) or len(raw) > MAX_MEDIUM_CHARS
            or not raw.replace("_", "").isalnum() or not raw.isascii()):
        raise KvEventDecodeError(f"medium {str(raw)[:40]!r}")
    return raw.lower()


def _group(raw: Any) -> int | None:
    return raw if isinstance(raw, int) and not isinstance(raw, bool) else None


def _at(seq: Sequence[Any], i: int) -> Any:
    return seq[i] if i < len(seq) else None


def _decode_event(raw: Any) -> KvEvent | None:
    """One event; None for an event type this version of headroom does not know.

    Two layouts: msgspec tagged structs as maps with a ``"type"`` key (vLLM 0.2x+), and
    the older ``array_like`` arrays with the tag first and the fields in declaration
    order (BlockStored: hashes, parent, token_ids, block_size, lora_id, medium,
    lora_name, extra_keys, group_idx; BlockRemoved: hashes, medium, group_idx). Fields
    this version does not know are ignored in both."""
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
        if tag == "AllBlocksCleared":
            return AllBlocksCleared(_medium(raw.get("medium")))
    elif isinstance(raw, list) and raw and isinstance(raw[0], str):
        tag = raw[0]
        if tag == "BlockStored":
            return BlockStored(_hashes(_at(raw, 1)), _medium(_at(raw, 6)), _group(_at(raw, 9)))
        if tag == "BlockRemoved":
            return BlockRemoved(_hashes(_at(raw, 1)), _medium(_at(raw, 2)), _group(_at(raw, 3)))
        if tag == "AllBlocksCleared":
            return AllBlocksCleared(_medium(_at(raw, 1)))
    else:
        raise KvEventDecodeError(f"event is {type(raw).__name__}, not a tagged struct")
    if not isinstance(tag, str):
        raise KvEventDecodeError(f"event tag {str(tag)[:40]!r}")
    return None


def decode_batch(payload: bytes) -> KvEventBatch:
    """msgpack ``[ts, events, dp_rank?]`` -> ``KvEventBatch``; ``KvEventDecodeError`` if not."""
    try:
        raw = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise KvEventDecodeError(f"not msgpack: {exc!r}"[:200]) from exc
    if isinstance(raw, Mapping):  # EventBatch without array_like (some 0.1x releases)
        raw = [raw.get("ts"), raw.get("events"), raw.get("data_parallel_rank")]
    if not isinstance(raw, list) or len(raw) < 2 or not isinstance(raw[1], list):
        raise KvEventDecodeError("payload is not [ts, events, dp_rank]")
    ts, events = raw[0], raw[1]
    if not isinstance(ts, int | float) or isinstance(ts, bool):
        raise KvEventDecodeError(f"ts is {type(ts).__name__}")
    rank = _at(raw, 2)
    if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool)
                             or not 0 <= rank < MAX_DP_RANK):
        raise KvEventDecodeError(f"data_parallel_rank {str(rank)[:40]!r}")
    decoded = tuple(e for e in map(_decode_event, events) if e is not None)
    return KvEventBatch(float(ts), decoded, rank)


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


class LostReason(enum.Enum):
    """Why events were lost: the ``reason`` label of headroom_vllm_kv_events_lost_total."""

    GAP = "gap"  # batches never applied: never arrived, not even by replay, or dropped
    # from the held ones while a replay ran too long
    OVERFLOW = "overflow"  # events dropped at a bound (blocks, media, engines)
    GARBAGE = "garbage"  # messages that are not KV event batches
    DISCONNECT = "disconnect"  # connections to the publisher lost


@dataclass
class TrackerStats:
    batches: int = 0
    garbage: int = 0
    duplicates: int = 0
    gaps: int = 0  # holes seen in the live sequence (most filled by a replay)
    lost_batches: int = 0  # sequence numbers never seen (replay buffer too short, no replay)
    resets: int = 0
    overflow_blocks: int = 0  # stores dropped at the cap
    overflow_events: int = 0  # events of media or engines beyond their bounds
    disconnects: int = 0

    def lost(self) -> dict[LostReason, int]:
        return {
            LostReason.GAP: self.lost_batches,
            LostReason.OVERFLOW: self.overflow_blocks + self.overflow_events,
            LostReason.GARBAGE: self.garbage,
            LostReason.DISCONNECT: self.disconnects,
        }


GroupKey = tuple[str, str, int | None]  # (engine, medium, group)
MediumKey = tuple[str, str]  # (engine, medium)


@dataclass
class KvBlockTracker:
    """Live block hashes of one publisher (one engine), fed batch by batch.

    ``default_engine`` labels batches that carry no dp_rank. ``max_blocks`` bounds memory:
    stores beyond it are dropped and counted; set it from the engine's capacity with
    ``set_capacity``. ``max_media`` and ``max_engines`` bound the label values a publisher
    can make us export.

    Exactness: the count of an (engine, medium) is *exact* when every batch since the
    publisher's sequence 0 (or since that medium was last cleared) was applied. A lost
    batch (a hole no replay filled, an undecodable batch, a held batch dropped, a history
    that starts after sequence 0) could have stored or removed anything: every count is
    unknown until the engine restarts (its sequence starts over) or clears that medium.
    ``prefix_cache_blocks(exact_only=True)`` leaves unknown counts out; they are never
    exported as if they were true.
    """

    default_engine: str = "0"
    max_blocks: int = DEFAULT_MAX_BLOCKS
    max_held: int = DEFAULT_MAX_HELD
    max_media: int = 4
    max_engines: int = 8
    stats: TrackerStats = field(default_factory=TrackerStats)
    last_seq: int | None = None
    _blocks: dict[GroupKey, set[int]] = field(default_factory=dict)
    _total: int = 0
    _holding: bool = False
    _held: list[tuple[int, KvEventBatch]] = field(default_factory=list)
    _overflow_logged: bool = False
    _unsure: bool = False  # a loss of unknown scope since the engine's sequence 0
    _cleared: set[MediumKey] = field(default_factory=set)  # cleared since that loss
    _unsure_keys: set[MediumKey] = field(default_factory=set)  # stores dropped at the cap

    # -- queries --
    def prefix_cache_blocks(self, *, exact_only: bool = False) -> dict[MediumKey, int]:
        """(engine, medium) -> live blocks, summed over KV cache groups; with
        ``exact_only`` only the counts known to be exact."""
        out: dict[MediumKey, int] = {}
        for (engine, medium, _), hashes in self._blocks.items():
            if exact_only and not self.exact(engine, medium):
                continue
            out[(engine, medium)] = out.get((engine, medium), 0) + len(hashes)
        return out

    def media(self) -> list[MediumKey]:
        """Every (engine, medium) seen since the engine's sequence 0, sorted."""
        return sorted({(e, m) for e, m, _ in self._blocks})

    def exact(self, engine: str, medium: str) -> bool:
        key = (engine, medium)
        return key not in self._unsure_keys and (not self._unsure or key in self._cleared)

    @property
    def replay_from(self) -> int:
        """First sequence number missing (0 before any batch)."""
        return 0 if self.last_seq is None else self.last_seq + 1

    @property
    def holding(self) -> bool:
        return self._holding

    def set_capacity(self, blocks: int) -> None:
        """Cap from what vLLM says it can hold (all media). Twice that: vLLM 0.3x can give
        a block a partial-prefix entry besides its full one; more than that is not a
        vLLM we understand."""
        self.max_blocks = max(2 * blocks + 64, 64)

    # -- feeding --
    def begin_replay(self) -> None:
        """Hold live batches until ``replay_done`` (used for the start-up history replay)."""
        self._holding = True

    def note_disconnect(self) -> None:
        """The connection to the publisher dropped: what it sent meanwhile is gone unless
        a replay brings it back (the subscriber asks for one on reconnecting)."""
        self.stats.disconnects += 1

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
            self._commit(seq, batch)

    def clear(self) -> None:
        """Forget everything: a new engine (its sequence starts over), all counts exact."""
        self._blocks.clear()
        self._total = 0
        self._held.clear()
        self.last_seq = None
        self._unsure = False
        self._cleared.clear()
        self._unsure_keys.clear()

    # -- internals --
    def _apply_replayed(self, seq: int, batch: KvEventBatch) -> Outcome:
        if self.last_seq is not None and seq <= self.last_seq:
            self.stats.duplicates += 1
            return Outcome.DUPLICATE
        self._commit(seq, batch)
        return Outcome.APPLIED

    def _hold(self, seq: int, batch: KvEventBatch) -> None:
        if len(self._held) >= self.max_held:
            # dropped: a gap when the held batches are applied, unless the replay has it
            self._held.pop(0)
        self._held.append((seq, batch))

    def _lose(self, why: str) -> None:
        """A batch of unknown content is gone: every count is unknown from here on."""
        if not self._unsure:
            log.warning("KV events: %s; prefix-cache counts are unknown until the engine "
                        "clears its cache or restarts", why)
        self._unsure = True
        self._cleared.clear()

    def _garbage(self, why: str, seq: int | None, replay: bool) -> Outcome:
        self.stats.garbage += 1
        if self.stats.garbage == 1 or self.stats.garbage % 1000 == 0:
            log.warning("KV events: skipped %d bad message(s), latest: %s",
                        self.stats.garbage, why[:200])
        # a readable sequence still moves on, so the next batch is not taken for a gap;
        # what that batch held is unknown
        if seq is not None and not replay and not self._holding and (
            self.last_seq is None or seq == self.last_seq + 1
        ):
            self.last_seq = seq
            self._lose("an undecodable batch")
        return Outcome.GARBAGE

    def _commit(self, seq: int, batch: KvEventBatch) -> None:
        first = 0 if self.last_seq is None else self.last_seq + 1
        if seq > first:
            self.stats.lost_batches += seq - first if self.last_seq is not None else 0
            self._lose(f"batches {first} to {seq - 1} never arrived"
                       if self.last_seq is not None else
                       f"history before batch {seq} is no longer available")
        self.last_seq = seq
        self.stats.batches += 1
        engine = str(batch.dp_rank) if batch.dp_rank is not None else self.default_engine
        for ev in batch.events:
            if isinstance(ev, AllBlocksCleared):
                # The sets are emptied, not dropped: the count reads 0 (absent would mean
                # that events are off, and a vanished series freezes dashboards).
                for key in [k for k in self._blocks if k[:2] == (engine, ev.medium)]:
                    self._total -= len(self._blocks[key])
                    self._blocks[key].clear()
                if (engine, ev.medium) in self._known_media() or self._room(engine, ev.medium):
                    self._cleared.add((engine, ev.medium))
                    self._unsure_keys.discard((engine, ev.medium))
            elif isinstance(ev, BlockStored):
                live = self._set(engine, ev.medium, ev.group)
                if live is None:
                    self.stats.overflow_events += 1
                else:
                    self._store(live, ev, (engine, ev.medium))
            else:
                live = self._blocks.get((engine, ev.medium, ev.group))
                if live:
                    before = len(live)
                    live.difference_update(ev.hashes)
                    self._total -= before - len(live)

    def _known_media(self) -> set[MediumKey]:
        return {(e, m) for e, m, _ in self._blocks}

    def _room(self, engine: str, medium: str) -> bool:
        """May (engine, medium) get its own series? Bounded per publisher."""
        known = self._known_media()
        engines = {e for e, _ in known}
        if engine not in engines and len(engines) >= self.max_engines:
            return False
        return sum(1 for e, _ in known if e == engine) < self.max_media

    def _set(self, engine: str, medium: str, group: int | None) -> set[int] | None:
        key = (engine, medium, group)
        live = self._blocks.get(key)
        if live is None:
            if (engine, medium) not in self._known_media() and not self._room(engine, medium):
                return None
            live = self._blocks[key] = set()
        return live

    def _store(self, live: set[int], ev: BlockStored, key: MediumKey) -> None:
        for h in ev.hashes:
            if h in live:
                continue
            if self._total >= self.max_blocks:
                self.stats.overflow_blocks += 1
                self._unsure_keys.add(key)
                if not self._overflow_logged:
                    log.warning("KV events: more than %d live blocks; dropping new ones (the "
                                "count is unknown from now on)", self.max_blocks)
                    self._overflow_logged = True
                continue
            live.add(h)
            self._total += 1


# --- the subscriber --------------------------------------------------------------------

CONNECT_GRACE = 10.0  # seconds a subscriber may take to connect before it is reported


@dataclass
class KvEventSubscriber:
    """Follows one publisher (one DP rank) into a ``KvBlockTracker`` until cancelled.

    On start it asks the replay endpoint for everything still buffered (from 0), so a
    restarted exporter learns the blocks cached before it came up, as far as vLLM's buffer
    (buffer_steps batches) reaches. ZMQ reconnects by itself; a socket monitor tells us
    when the connection drops (counted, and ``connected`` is False meanwhile) and when it
    is back (then a replay fetches what was published during the outage: a PUB socket
    drops what it cannot send).
    """

    source: KvEventEndpoint
    tracker: KvBlockTracker = field(default_factory=KvBlockTracker)
    replay_timeout: float = 2.0
    ctx: zmq.asyncio.Context | None = None
    connected: bool = False
    ever_connected: bool = False

    def __post_init__(self) -> None:
        if self.tracker.default_engine == "0":
            self.tracker.default_engine = str(self.source.dp_rank)

    def prefix_cache_blocks(self, *, exact_only: bool = False) -> dict[MediumKey, int]:
        return self.tracker.prefix_cache_blocks(exact_only=exact_only)

    async def run(self) -> None:
        ctx = self.ctx or zmq.asyncio.Context.instance()
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.RCVHWM, 100_000)
        sub.setsockopt(zmq.RECONNECT_IVL, 100)
        sub.setsockopt(zmq.RECONNECT_IVL_MAX, 5000)  # a vLLM down for long: not a storm
        monitor = sub.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        sub.connect(self.source.endpoint)
        sub.setsockopt(zmq.SUBSCRIBE, self.source.topic.encode())
        poller = zmq.asyncio.Poller()
        poller.register(sub, zmq.POLLIN)
        poller.register(monitor, zmq.POLLIN)
        try:
            if self.source.replay_endpoint:
                await self._replay(ctx, sub, self.tracker.replay_from)
            while True:
                ready = dict(await poller.poll())
                if monitor in ready:
                    await self._on_monitor(ctx, sub, await monitor.recv_multipart())
                if sub in ready:
                    await self._on_message(ctx, sub, await sub.recv_multipart())
        finally:
            self.connected = False
            sub.disable_monitor()
            monitor.close(linger=0)
            sub.close(linger=0)

    async def _on_monitor(self, ctx: zmq.asyncio.Context, sub: zmq.asyncio.Socket,
                          frames: list[bytes]) -> None:
        try:
            event = zmq.utils.monitor.parse_monitor_message(frames)["event"]
        except Exception:  # a monitor frame we cannot read: ignore it
            return
        if event == zmq.EVENT_DISCONNECTED:
            if self.connected:
                log.info("KV events: lost the connection to %s", self.source.endpoint)
                self.tracker.note_disconnect()
            self.connected = False
        elif event == zmq.EVENT_CONNECTED:
            again = self.ever_connected
            self.connected = self.ever_connected = True
            if again and self.source.replay_endpoint:
                # what was published while we were away: PUB drops it, the buffer has it
                await self._replay(ctx, sub, self.tracker.replay_from)

    async def _on_message(self, ctx: zmq.asyncio.Context, sub: zmq.asyncio.Socket,
                          frames: list[bytes]) -> None:
        outcome = self.tracker.apply_frames(frames)
        if outcome is Outcome.GAP:
            if self.source.replay_endpoint:
                await self._replay(ctx, sub, self.tracker.replay_from)
            else:
                self.tracker.replay_done()  # nothing to ask: accept the loss
        elif outcome is Outcome.RESET and self.tracker.last_seq and self.source.replay_endpoint:
            # restarted and we missed its first batches: fetch them from 0
            self.tracker.clear()
            await self._replay(ctx, sub, 0)

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


@dataclass(frozen=True)
class KvEventsState:
    """What the hub knows about one vLLM instance's KV events, at one scrape."""

    # (engine, medium) -> live blocks, exact counts only
    prefix_blocks: Mapping[MediumKey, int]
    # (engine, medium) -> whether its count is exported (False: unknown or not connected)
    synced: Mapping[MediumKey, bool]
    # (engine, reason) -> events lost since the exporter started (counters)
    lost: Mapping[tuple[str, LostReason], int]
    problems: tuple[str, ...]  # not connected, restarted after a crash: the scrape says so


@dataclass
class _Follow:
    subscriber: KvEventSubscriber
    task: asyncio.Task[None]
    started: float
    crashes: int = 0


@dataclass
class KvEventsHub:
    """One subscriber per KV-event endpoint of each vLLM instance, kept in step with discovery.

    ``key`` names a vLLM instance (e.g. its /metrics URL). Call ``ensure`` on each discovery
    pass with the endpoints seen (an empty tuple stops them): a subscriber whose task ended
    (it crashed) is started again there, with the same tracker, so it replays from where it
    stopped. Read ``state`` at scrape time. Must be used from one event loop.
    """

    replay_timeout: float = 2.0
    connect_grace: float = CONNECT_GRACE
    ctx: zmq.asyncio.Context | None = None
    _subs: dict[str, dict[KvEventEndpoint, _Follow]] = field(default_factory=dict)
    _crashed: dict[str, list[str]] = field(default_factory=dict)  # key -> this pass's crashes

    def ensure(self, key: str, endpoints: Sequence[KvEventEndpoint],
               capacity_blocks: int | None = None) -> None:
        current = self._subs.setdefault(key, {})
        for ep in set(current) - set(endpoints):
            current.pop(ep).task.cancel()
        loop = asyncio.get_running_loop()
        crashed = self._crashed.setdefault(key, [])
        for ep in endpoints:
            f = current.get(ep)
            if f is not None and f.task.done():
                why = "ended" if f.task.cancelled() else repr(f.task.exception())[:200]
                crashed.append(f"KV event subscriber of {ep.endpoint} {why}; restarted")
                f.subscriber.connected = False
                f.subscriber.tracker.note_disconnect()
                f.task = self._start(f.subscriber)
                f.crashes += 1
            elif f is None:
                sub = KvEventSubscriber(ep, replay_timeout=self.replay_timeout, ctx=self.ctx)
                current[ep] = _Follow(sub, self._start(sub), loop.time())
            if capacity_blocks:
                current[ep].subscriber.tracker.set_capacity(capacity_blocks)
        if not current:
            del self._subs[key]
            self._crashed.pop(key, None)

    def _start(self, sub: KvEventSubscriber) -> asyncio.Task[None]:
        task = asyncio.create_task(sub.run(), name=f"kv-events {sub.source.endpoint}")
        task.add_done_callback(_log_task_end)
        return task

    def state(self, key: str) -> KvEventsState:
        """Exact counts, sync flags, loss counters and problems of that instance's
        subscribers (problems are reported once per pass: crashes since the last call)."""
        blocks: dict[MediumKey, int] = {}
        synced: dict[MediumKey, bool] = {}
        lost: dict[tuple[str, LostReason], int] = {}
        problems = self._crashed.pop(key, [])
        now = asyncio.get_running_loop().time()
        for ep, f in sorted(self._subs.get(key, {}).items(), key=lambda x: x[0].dp_rank):
            sub, tracker = f.subscriber, f.subscriber.tracker
            up = sub.connected and not f.task.done()
            if not up and (sub.ever_connected or now - f.started >= self.connect_grace):
                problems.append(f"KV events: not connected to {ep.endpoint}")
            exact = tracker.prefix_cache_blocks(exact_only=True) if up else {}
            for k in tracker.media():
                synced[k] = k in exact
                if k in exact:
                    blocks[k] = blocks.get(k, 0) + exact[k]
            engine = tracker.default_engine
            for reason, n in tracker.stats.lost().items():
                lost[(engine, reason)] = lost.get((engine, reason), 0) + n
        return KvEventsState(blocks, synced, lost, tuple(problems))

    def prefix_cache_blocks(self, key: str) -> dict[MediumKey, int]:
        """(engine, medium) -> live blocks (exact ones) over all endpoints of that instance."""
        return dict(self.state(key).prefix_blocks)

    def endpoints(self, key: str) -> list[KvEventEndpoint]:
        """The endpoints followed for that instance."""
        return sorted(self._subs.get(key, {}), key=lambda e: e.dp_rank)

    def instances(self) -> list[str]:
        """The vLLM instances followed."""
        return sorted(self._subs)

    async def close(self) -> None:
        tasks = [f.task for subs in self._subs.values() for f in subs.values()]
        self._subs.clear()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _log_task_end(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("KV events: %s stopped: %r", task.get_name(), task.exception())
