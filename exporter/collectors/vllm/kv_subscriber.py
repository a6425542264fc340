"""Following vLLM's KV-event publishers: one ZMQ subscriber per endpoint feeding a
``KvBlockTracker`` (``kv_events.py``), and the hub that keeps them in step with discovery,
restarts a subscriber that died and says what it knows (exact counts, sync, losses).
The wire format is described in ``kv_wire.py``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import zmq
import zmq.asyncio
import zmq.utils.monitor

from exporter.collectors.vllm.discovery import KvEventEndpoint
from exporter.collectors.vllm.kv_events import (
    KvBlockTracker,
    LostReason,
    MediumKey,
    Outcome,
    is_replay_end,
)

log = logging.getLogger("exporter.collectors.vllm.kv_events")


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
