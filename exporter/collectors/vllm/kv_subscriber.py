"""Following vLLM's KV-event publishers: one ZMQ subscriber per endpoint feeding a
``KvBlockTracker`` (``kv_events.py``), and the hub that keeps them in step with discovery,
restarts a subscriber that died and says what it knows (exact counts, sync, losses).
The wire format is described in ``kv_wire.py``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from exporter.collectors.vllm.kv_endpoints import KvEventEndpoint
from exporter.collectors.vllm.kv_events import (
    KvBlockTracker,
    LostReason,
    MediumKey,
    Outcome,
)
from exporter.collectors.vllm.kv_wire import Message, is_replay_end, read_message
from exporter.collectors.vllm.zmtp import Limits, ZmtpConnection, ZmtpError, ZmtpLimitError

log = logging.getLogger("exporter.collectors.vllm.kv_events")


CONNECT_GRACE = 10.0  # seconds a subscriber may take to connect before it is reported
CONNECT_TIMEOUT = 2.0  # TCP connect + ZMTP handshake
RECONNECT_MIN, RECONNECT_MAX = 0.1, 5.0  # a vLLM down for long: not a storm
RECONNECT_HOSTILE = 30.0  # after a peer broke the protocol or the limits
LIMITS = Limits()
# Messages read ahead of the tracker, per connection: with LIMITS.max_message bytes each,
# the receive queue holds at most RECV_QUEUE x 2 MiB (then TCP pushes back on the peer).
RECV_QUEUE = 2
# One decoder thread for every subscriber: msgpack decoding never runs on the event loop,
# and at most one message is being decoded at a time (its objects are the peak memory).
_DECODER = ThreadPoolExecutor(1, thread_name_prefix="kv-decode")


# CPU a publisher can make us spend: what it sends is decoded at most at this rate
# (bytes per second, with a burst of one largest message); a real vLLM step sends a few
# KiB, a long prefill a few hundred: past this the count is unknown, never wrong.
RATE_BYTES_PER_S = 256 << 10
RATE_BURST_BYTES = 2 << 20


@dataclass
class DecodeBudget:
    """Bytes of one publisher's messages that may be decoded: ``rate`` per second, up to
    ``burst`` at once (a token bucket)."""

    rate: float
    burst: float
    tokens: float = 0.0
    stamp: float | None = None

    def take(self, n: int, now: float) -> bool:
        if self.stamp is None:
            self.tokens = self.burst
        else:
            self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if n > self.tokens:
            return False
        self.tokens -= n
        return True


def sequence_of(frames: Sequence[bytes]) -> int | None:
    """The sequence number of a SUB message, without decoding it."""
    if len(frames) == 3 and len(frames[1]) == 8:
        return int.from_bytes(frames[1], "big", signed=True)
    return None


async def decode(frames: list[bytes], *, replay: bool = False) -> Message:
    """``read_message`` in the decoder thread: the loop keeps serving meanwhile."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_DECODER, lambda: read_message(frames, replay=replay))


@dataclass
class _Link:
    """One live SUB connection: a reader task feeding a bounded queue of messages."""

    conn: ZmtpConnection
    queue: asyncio.Queue[list[bytes] | BaseException]
    task: asyncio.Task[None]

    @classmethod
    def start(cls, conn: ZmtpConnection) -> _Link:
        queue: asyncio.Queue[list[bytes] | BaseException] = asyncio.Queue(RECV_QUEUE)

        async def pump() -> None:
            try:
                while True:
                    await queue.put(await conn.recv())
            except (OSError, ZmtpError) as exc:
                await queue.put(exc)

        return cls(conn, queue, asyncio.create_task(pump()))

    async def next(self) -> list[bytes]:
        item = await self.queue.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self.task.cancel()
        self.conn.close()


@dataclass
class KvEventSubscriber:
    """Follows one publisher (one DP rank) into a ``KvBlockTracker`` until cancelled.

    On each connection it asks the replay endpoint for what it missed: everything still
    buffered (from 0) the first time, so a restarted exporter learns the blocks cached
    before it came up, as far as vLLM's buffer (buffer_steps batches) reaches; from the
    last batch applied after a reconnection, which also tells a restarted vLLM (its
    sequence starts over at 0: see ``_resync``). Reconnects with a backoff, longer after
    a peer that broke the protocol or the limits (``zmtp.py``).
    """

    source: KvEventEndpoint
    tracker: KvBlockTracker = field(default_factory=KvBlockTracker)
    replay_timeout: float = 2.0
    connected: bool = False
    ever_connected: bool = False
    limits: Limits = LIMITS
    rate: DecodeBudget = field(
        default_factory=lambda: DecodeBudget(RATE_BYTES_PER_S, RATE_BURST_BYTES))

    def __post_init__(self) -> None:
        if self.tracker.default_engine == "0":
            self.tracker.default_engine = str(self.source.dp_rank)

    async def run(self) -> None:
        backoff = RECONNECT_MIN
        while True:
            try:
                conn = await ZmtpConnection.open(self.source.endpoint, "SUB",
                                                 timeout=CONNECT_TIMEOUT, limits=self.limits)
                await conn.send([b"\x01" + self.source.topic.encode()])  # SUBSCRIBE
            except (OSError, ZmtpError, asyncio.TimeoutError) as exc:
                log.debug("KV events: cannot connect to %s: %s", self.source.endpoint, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, RECONNECT_MAX)
                continue
            backoff = RECONNECT_MIN
            link = _Link.start(conn)
            self.connected = self.ever_connected = True
            try:
                if self.source.replay_endpoint:
                    await self._resync(link)
                while True:
                    await self._on_message(link, await link.next())
            except (OSError, ZmtpError) as exc:
                if isinstance(exc, ZmtpLimitError):
                    self.tracker.stats.garbage += 1
                    backoff = RECONNECT_HOSTILE
                log.info("KV events: lost the connection to %s: %s", self.source.endpoint,
                         str(exc)[:200])
                self.tracker.note_disconnect()
            finally:
                self.connected = False
                link.close()
            await asyncio.sleep(backoff)

    def _within_rate(self, frames: list[bytes]) -> bool:
        if self.rate.take(sum(map(len, frames)), asyncio.get_running_loop().time()):
            return True
        self.tracker.skip(sequence_of(frames))
        return False

    async def _on_message(self, link: _Link, frames: list[bytes]) -> None:
        if not self._within_rate(frames):
            return
        outcome = self.tracker.apply_message(await decode(frames))
        if outcome is Outcome.GAP:
            if self.source.replay_endpoint:
                await self._replay_all(link, self.tracker.replay_from)
            else:
                self.tracker.replay_done()  # nothing to ask: accept the loss
        elif outcome is Outcome.RESET and self.tracker.last_seq and self.source.replay_endpoint:
            # restarted and we missed its first batches: fetch them from 0
            self.tracker.clear()
            await self._replay_all(link, 0)

    async def _resync(self, link: _Link) -> None:
        """After (re)connecting: what the publisher sent while we were not connected.

        A restarted vLLM publishes from sequence 0 again, and its first batches may have
        gone out before we were back (a PUB socket sends nothing to a subscriber not yet
        connected). Asking from ``last_seq + 1`` would get nothing from it and leave its
        first batches unseen until a later batch went backwards; so ask from ``last_seq``:
        the same publisher answers that very batch (same sequence, same ts) and the rest;
        a restarted one answers another batch there, or none at all (its sequence has not
        got that far). Then its history is fetched from 0."""
        t = self.tracker
        t.begin_replay()
        try:
            if t.last_seq is None:
                await self._replay(link, 0)
                return
            answered, first = await self._replay(link, t.last_seq, probe=True)
            if answered and (first is None or first.batch is None
                             or (first.seq is not None and t.restarted(first.seq, first.batch))):
                log.info("KV events: %s started over (its sequence is back at 0); "
                         "fetching its history", self.source.endpoint)
                t.start_over()
                await self._replay(link, 0)
        finally:
            t.replay_done()

    async def _replay_all(self, link: _Link, start: int) -> None:
        self.tracker.begin_replay()
        try:
            await self._replay(link, start)
        finally:
            self.tracker.replay_done()

    async def _replay(self, link: _Link, start: int, *, probe: bool = False
                      ) -> tuple[bool, Message | None]:
        """Fetch buffered batches from ``start`` (live ones are held meanwhile). Returns
        whether the replay endpoint answered to the end, and its first batch. With
        ``probe``, stops at a first batch that is not ours (a restarted publisher)."""
        assert self.source.replay_endpoint is not None
        loop = asyncio.get_running_loop()
        try:
            dealer = await ZmtpConnection.open(self.source.replay_endpoint, "DEALER",
                                               timeout=self.replay_timeout,
                                               limits=self.limits)
        except (OSError, ZmtpError, asyncio.TimeoutError) as exc:
            log.info("KV events: no replay from %s: %s", self.source.replay_endpoint, exc)
            return False, None
        first: Message | None = None
        reply: asyncio.Task[list[bytes]] | None = None
        live: asyncio.Task[list[bytes]] | None = None
        try:
            await dealer.send([b"", start.to_bytes(8, "big", signed=True)])
            deadline = loop.time() + self.replay_timeout
            while (left := deadline - loop.time()) > 0:
                reply = reply or asyncio.ensure_future(dealer.recv())
                live = live or asyncio.ensure_future(link.next())
                done, _ = await asyncio.wait({reply, live}, timeout=left,
                                             return_when=asyncio.FIRST_COMPLETED)
                if live in done:
                    frames, live = live.result(), None
                    if self._within_rate(frames):
                        self.tracker.apply_message(await decode(frames))  # held
                if reply in done:
                    try:
                        frames = reply.result()
                    except ZmtpError as exc:
                        log.info("KV events: replay from %s broke off: %s",
                                 self.source.replay_endpoint, str(exc)[:200])
                        return False, first
                    reply = None
                    if is_replay_end(frames):
                        return True, first
                    msg = await decode(frames, replay=True)
                    if first is None:
                        first = msg
                        if probe and (msg.batch is None or msg.seq is None
                                      or self.tracker.restarted(msg.seq, msg.batch)):
                            return True, first
                    self.tracker.apply_message(msg, replay=True)
                    deadline = loop.time() + self.replay_timeout  # still streaming
            log.info("KV events: no replay answer from %s within %.1fs",
                     self.source.replay_endpoint, self.replay_timeout)
            return False, first
        finally:
            if reply is not None:
                reply.cancel()
            if live is not None:
                live.cancel()  # a pending get: the message stays in the queue
            dealer.close()


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
            elif f is None:
                sub = KvEventSubscriber(ep, replay_timeout=self.replay_timeout)
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
