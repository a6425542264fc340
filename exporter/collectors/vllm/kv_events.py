"""Live prefix-cache blocks per engine, counted from vLLM's KV cache events.

``KvBlockTracker`` is the pure state machine fed with the batches ``kv_wire.py`` decodes:
set semantics per (engine, medium, group), gap detection with held batches until a replay
fills the hole, reset when the sequence goes backwards (the engine restarted and its
publisher counts from 0 again), caps on blocks, media and engines, garbage counted and
skipped, and counts that are exported only while exact. ``kv_subscriber.py`` is the thin
zmq.asyncio loop.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from exporter.collectors.vllm.kv_wire import (
    END_SEQ,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KvEventBatch,
    KvEventDecodeError,
    Message,
    decode_batch,
    is_replay_end,
    read_message,
    replay_frames,
)

# The wire types are part of this module's interface (the tracker's input).
__all__ = [
    "DEFAULT_MAX_BLOCKS", "DEFAULT_MAX_HELD", "END_SEQ", "AllBlocksCleared", "BlockRemoved",
    "BlockStored", "KvBlockTracker", "KvEventBatch", "KvEventDecodeError", "LostReason",
    "MediumKey", "Message", "Outcome", "TrackerStats", "decode_batch", "is_replay_end",
    "read_message", "replay_frames",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_BLOCKS = 262_144  # per tracker (one publisher = one engine); ~18 MB of ints
DEFAULT_MAX_HELD = 10_000  # live batches held while a replay fills a gap
DEFAULT_MAX_HELD_COST = 262_144  # events + hashes of the held batches (~10 MB decoded)
DEFAULT_MAX_GROUPS = 16  # KV cache groups per (engine, medium): hybrid models have a few


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
    """What a tracker lost, by reason: exported as headroom_vllm_kv_events_lost_total."""

    garbage: int = 0
    lost_batches: int = 0  # sequence numbers never seen (replay buffer too short, no replay)
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
    max_held_cost: int = DEFAULT_MAX_HELD_COST
    max_media: int = 4
    max_engines: int = 8
    max_groups: int = DEFAULT_MAX_GROUPS
    stats: TrackerStats = field(default_factory=TrackerStats)
    last_seq: int | None = None
    last_ts: float | None = None  # ts of batch ``last_seq``: tells a restarted publisher
    # (engine, medium) -> group -> live hashes; every lookup is O(1) in the number of keys
    _blocks: dict[MediumKey, dict[int | None, set[int]]] = field(default_factory=dict)
    _media_of: dict[str, int] = field(default_factory=dict)  # engine -> media it has
    _total: int = 0
    _holding: bool = False
    _held: list[tuple[int, KvEventBatch]] = field(default_factory=list)
    _held_cost: int = 0
    _overflow_logged: bool = False
    _unsure: bool = False  # a loss of unknown scope since the engine's sequence 0
    _cleared: set[MediumKey] = field(default_factory=set)  # cleared since that loss
    _unsure_keys: set[MediumKey] = field(default_factory=set)  # stores dropped at the cap

    # -- queries --
    def prefix_cache_blocks(self, *, exact_only: bool = False) -> dict[MediumKey, int]:
        """(engine, medium) -> live blocks, summed over KV cache groups; with
        ``exact_only`` only the counts known to be exact."""
        return {key: sum(map(len, groups.values())) for key, groups in self._blocks.items()
                if not exact_only or self.exact(*key)}

    def media(self) -> list[MediumKey]:
        """Every (engine, medium) seen since the engine's sequence 0, sorted."""
        return sorted(self._blocks)

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
        self.max_blocks = min(max(2 * blocks + 64, 64), DEFAULT_MAX_BLOCKS)

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
        return self.apply_message(read_message(frames, replay=replay), replay=replay)

    def apply(self, seq: int, payload: bytes, *, replay: bool = False) -> Outcome:
        try:
            batch = decode_batch(payload)
        except KvEventDecodeError as exc:
            return self._garbage(str(exc), seq, replay)
        return self.apply_batch(seq, batch, replay=replay)

    def apply_message(self, msg: Message, *, replay: bool = False) -> Outcome:
        """A message ``read_message`` decoded: O(its events + hashes), both bounded."""
        if msg.batch is None:
            return self._garbage(msg.error, msg.seq, replay)
        assert msg.seq is not None
        return self.apply_batch(msg.seq, msg.batch, replay=replay)

    def skip(self, seq: int | None) -> None:
        """A message dropped unread at the publisher's rate budget: counted as overflow;
        the sequence moves on (no gap, no replay storm) and what it held is unknown."""
        self.stats.overflow_events += 1
        if seq is not None and not self._holding and (
                self.last_seq is None or seq == self.last_seq + 1):
            self.last_seq = seq
            self._lose("KV events beyond the publisher's rate budget were dropped")

    def restarted(self, seq: int, batch: KvEventBatch) -> bool:
        """Is this the batch of a publisher that started over? Ours had ``last_ts`` at
        ``last_seq``; the same publisher sends that sequence number with that ts again."""
        return (self.last_seq is not None and seq <= self.last_seq
                and not (seq == self.last_seq and batch.ts == self.last_ts))

    def apply_batch(self, seq: int, batch: KvEventBatch, *, replay: bool = False) -> Outcome:
        if replay:
            return self._apply_replayed(seq, batch)
        if self._holding:
            self._hold(seq, batch)
            return Outcome.HELD
        if self.last_seq is None or seq == self.last_seq + 1:
            self._commit(seq, batch)
            return Outcome.APPLIED
        if seq <= self.last_seq and not self.restarted(seq, batch):
            return Outcome.DUPLICATE
        if seq <= self.last_seq:
            log.info("KV events: sequence went back from %d to %d: engine restarted, "
                     "starting over", self.last_seq, seq)
            self.clear()
            self._commit(seq, batch)
            return Outcome.RESET
        self._holding = True
        self._hold(seq, batch)
        return Outcome.GAP

    def replay_done(self) -> None:
        """The replay ended (or timed out, or there is none): apply what was held, in order."""
        self._holding = False
        held, self._held = sorted(self._held, key=lambda x: x[0]), []
        self._held_cost = 0
        for seq, batch in held:
            if self.last_seq is not None and seq <= self.last_seq:
                continue
            self._commit(seq, batch)

    def start_over(self) -> None:
        """The publisher restarted (found during a replay): forget its old state, keep
        holding the live batches of the new one."""
        held, holding = list(self._held), self._holding
        self.clear()
        self._holding = holding
        for seq, batch in held:
            self._hold(seq, batch)

    def clear(self) -> None:
        """Forget everything: a new engine (its sequence starts over), all counts exact."""
        self._blocks.clear()
        self._media_of.clear()
        self._total = 0
        self._held.clear()
        self._held_cost = 0
        self.last_seq = None
        self.last_ts = None
        self._unsure = False
        self._cleared.clear()
        self._unsure_keys.clear()

    # -- internals --
    def _apply_replayed(self, seq: int, batch: KvEventBatch) -> Outcome:
        if self.last_seq is not None and seq <= self.last_seq:
            return Outcome.DUPLICATE
        self._commit(seq, batch)
        return Outcome.APPLIED

    def _hold(self, seq: int, batch: KvEventBatch) -> None:
        # bounded in batches and in what they hold: the oldest are dropped (a gap when
        # the held batches are applied, unless the replay has them)
        while self._held and (len(self._held) >= self.max_held
                              or self._held_cost + batch.cost > self.max_held_cost):
            self._held_cost -= self._held.pop(0)[1].cost
        self._held.append((seq, batch))
        self._held_cost += batch.cost

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
        self.last_ts = batch.ts
        engine = str(batch.dp_rank) if batch.dp_rank is not None else self.default_engine
        if batch.dropped:
            self.stats.overflow_events += batch.dropped
            self._lose(f"batch {seq} had more than {len(batch.events)} events or hashes")
        for ev in batch.events:
            if isinstance(ev, AllBlocksCleared):
                # The sets are emptied, not dropped: the count reads 0 (absent would mean
                # that events are off, and a vanished series freezes dashboards).
                key = (engine, ev.medium)
                for group in self._blocks.get(key, {}).values():
                    self._total -= len(group)
                    group.clear()
                if key in self._blocks or self._room(engine):
                    self._cleared.add(key)
                    self._unsure_keys.discard(key)
            elif isinstance(ev, BlockStored):
                target = self._set(engine, ev.medium, ev.group)
                if target is None:
                    self.stats.overflow_events += 1
                else:
                    self._store(target, ev, (engine, ev.medium))
            else:
                found = self._blocks.get((engine, ev.medium), {}).get(ev.group)
                if found:
                    before = len(found)
                    found.difference_update(ev.hashes)
                    self._total -= before - len(found)

    def _room(self, engine: str) -> bool:
        """May ``engine`` get one more (engine, medium) series? Bounded per publisher."""
        if engine not in self._media_of:
            return len(self._media_of) < self.max_engines
        return self._media_of[engine] < self.max_media

    def _set(self, engine: str, medium: str, group: int | None) -> set[int] | None:
        """The live set of (engine, medium, group); None past the bounds on media, engines
        and groups (the store is counted as overflow, that count is unknown from then)."""
        key = (engine, medium)
        groups = self._blocks.get(key)
        if groups is None:
            if not self._room(engine):
                return None
            groups = self._blocks[key] = {}
            self._media_of[engine] = self._media_of.get(engine, 0) + 1
        live = groups.get(group)
        if live is None:
            if len(groups) >= self.max_groups:
                self._unsure_keys.add(key)
                return None
            live = groups[group] = set()
        return live

    def _store(self, live: set[int], ev: BlockStored, key: MediumKey) -> None:
        room = self.max_blocks - self._total
        before = len(live)
        if len(ev.hashes) <= room:
            live.update(ev.hashes)
            self._total += len(live) - before
            return
        for h in ev.hashes:
            if len(live) - before >= room:
                break
            live.add(h)
        self._total += len(live) - before
        dropped = sum(1 for h in ev.hashes if h not in live)
        if dropped:
            self.stats.overflow_blocks += dropped
            self._unsure_keys.add(key)
            if not self._overflow_logged:
                log.warning("KV events: more than %d live blocks; dropping new ones (the "
                            "count is unknown from now on)", self.max_blocks)
                self._overflow_logged = True
