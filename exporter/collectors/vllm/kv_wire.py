"""vLLM's KV cache events on the wire (pure decoding).

Wire format (vllm/distributed/kv_events.py, ZmqEventPublisher): each message has three
frames: topic, an 8-byte big-endian sequence number, and a msgpack ``EventBatch``. The batch
is a msgspec struct with ``array_like=True``: ``[ts, events, data_parallel_rank]`` (the rank
omitted when it is the default; a map in some 0.1x releases). Events are tagged structs,
tag first in the legacy array layout (``["BlockStored", block_hashes, parent, token_ids,
block_size, lora_id, medium, ...]``, releases up to about 0.23) and a map with a
``"type"`` key after (``{"type": "BlockStored", "block_hashes": ..., "medium": "GPU",
"group_idx": 0}``); both are read, unknown fields and event types skipped. Hashes are ints
(old) or 32-byte digests. A field that could not be what vLLM sends (a medium that is no
short name, a DP rank out of range) makes the batch garbage: it would become a label.

Replay: a DEALER socket sends ``[b"", start_seq(8 bytes)]`` to the ROUTER replay endpoint;
it answers one message per buffered batch from ``start_seq`` on, then an end marker with
sequence -1 (signed 8 bytes). 0.32 answers ``[b"", topic, seq, payload]`` and ends with
``[b"", b"", -1, b""]``; older releases leave the topic out (``[b"", seq, payload]``, end
``[b"", -1, b""]``). Both are read. (A REQ socket would get only the first reply.)

``read_message`` turns the frames of one message into its sequence number and batch (or
why it is garbage); ``kv_events.py`` applies them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

END_SEQ = -1


class KvEventDecodeError(ValueError):
    """A frame or payload that is not a vLLM KV event batch."""


# --- decoding ------------------------------------------------------------------------

MAX_DP_RANK = 1 << 16  # a rank beyond this is not a real engine: the batch is garbage
# Work per batch is bounded whatever a publisher sends. A real vLLM step stores or
# evicts at most a few thousand blocks (max_num_batched_tokens / block_size, plus one
# BlockRemoved per evicted block): events and hashes beyond these are dropped and counted
# as overflow. An array longer than MAX_ARRAY_LEN cannot be vLLM's: the batch is garbage.
MAX_EVENTS_PER_BATCH = 65_536
MAX_HASHES_PER_BATCH = 262_144
MAX_ARRAY_LEN = MAX_HASHES_PER_BATCH
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
    dropped: int = 0  # events left out at MAX_EVENTS_PER_BATCH / MAX_HASHES_PER_BATCH

    @property
    def cost(self) -> int:
        """Events plus hashes: what applying (or holding) the batch costs."""
        return len(self.events) + sum(
            len(e.hashes) for e in self.events if not isinstance(e, AllBlocksCleared))


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
        raw = msgpack.unpackb(payload, raw=False, strict_map_key=False,
                              max_array_len=MAX_ARRAY_LEN, max_map_len=MAX_ARRAY_LEN)
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
    decoded: list[KvEvent] = []
    hashes = 0
    for i, raw_event in enumerate(events):
        if len(decoded) >= MAX_EVENTS_PER_BATCH or hashes >= MAX_HASHES_PER_BATCH:
            return KvEventBatch(float(ts), tuple(decoded), rank, len(events) - i)
        ev = _decode_event(raw_event)
        if ev is not None:
            decoded.append(ev)
            hashes += 0 if isinstance(ev, AllBlocksCleared) else len(ev.hashes)
    return KvEventBatch(float(ts), tuple(decoded), rank)


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


@dataclass(frozen=True)
class Message:
    """One message read off the wire: its sequence number and batch, or why not."""

    seq: int | None  # None: the frames are not [topic, seq, payload]
    batch: KvEventBatch | None  # None: garbage (``error`` says why)
    error: str = ""


def read_message(frames: Sequence[bytes], *, replay: bool = False) -> Message:
    """A SUB message ``[topic, seq, payload]`` or a replay reply (see ``replay_frames``),
    decoded. Pure and thread-safe: the subscriber runs it off the event loop."""
    if replay:
        frames = replay_frames(frames) or [b"", b"", b""]
    if len(frames) != 3 or len(frames[1]) != 8:
        return Message(None, None, f"{len(frames)} frames")
    seq = int.from_bytes(frames[1], "big", signed=True)
    try:
        return Message(seq, decode_batch(frames[2]))
    except KvEventDecodeError as exc:
        return Message(seq, None, str(exc))
